package redisclient

import (
	"fmt"
	"net/url"
	"strings"
)

// String describes the target on one line for logs, never with a
// password: "redis cluster 10.0.0.1:6379,10.0.0.2:6379 (tls, user
// alice, password set)". A target whose URL does not read is described by
// its settings, the URL's password masked.
func (t Target) String() string {
	ep, err := t.parse()
	if err != nil {
		return fmt.Sprintf("redis %s %s %s (invalid: %s_URL)", orDefault(t.Type, TypeSingle), orDefault(t.SocketType, SocketTCP), redactURL(t.URL), t.prefix())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "redis %s", ep.kind)
	switch {
	case ep.socket == SocketUnix:
		fmt.Fprintf(&b, " unix %s", ep.addrs[0])
	case ep.kind == TypeSentinel:
		fmt.Fprintf(&b, " master %s via sentinels %s", ep.masterSet, strings.Join(ep.addrs, ","))
	default:
		b.WriteString(" " + strings.Join(ep.addrs, ","))
	}
	var notes []string
	if t.TLS || ep.tls {
		notes = append(notes, "tls")
	}
	if ep.db != 0 {
		notes = append(notes, fmt.Sprintf("db %d", ep.db))
	}
	if user, password, err := t.credentials(ep); err == nil {
		if user != "" {
			notes = append(notes, "user "+user)
		}
		if password != "" {
			notes = append(notes, "password set")
		}
	}
	if ep.kind == TypeSentinel && t.SentinelAuth != "" {
		notes = append(notes, "sentinel password set")
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
	}
	return b.String()
}

// String describes both targets on one line for logs, never with a
// password: the main one, then "; per-second " and the other.
func (o Options) String() string {
	if o.PerSecond == nil {
		return o.Main.String()
	}
	return o.Main.String() + "; per-second " + o.PerSecond.String()
}

func orDefault(v, def string) string {
	if v = strings.ToLower(strings.TrimSpace(v)); v == "" {
		return def
	}
	return v
}

// RedactURL returns a REDIS_URL value with the password of every URL in
// it replaced by "***", for logs and error messages.
func RedactURL(s string) string { return redactURL(s) }

func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		scheme, rest, ok := strings.Cut(p, "://")
		if !ok {
			continue
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		info := "***" // user info without a colon may be a password
		if u, err := url.Parse(p); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				info = u.User.Username() + ":***"
			}
		}
		parts[i] = scheme + "://" + info + rest[at:]
	}
	return strings.Join(parts, ",")
}
