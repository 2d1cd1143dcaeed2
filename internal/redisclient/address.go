package redisclient

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// endpoint is a Target's URL read: where to connect and what its URLs
// carried.
type endpoint struct {
	socket    string   // SocketTCP or SocketUnix
	kind      string   // TypeSingle, TypeSentinel or TypeCluster
	addrs     []string // host:port (the sentinels' for sentinel), or one socket path
	masterSet string   // sentinel: the master's name
	user      string   // from a URL's user info
	password  string
	hasCreds  bool // a URL carried user info
	tls       bool // a rediss:// URL
	db        int  // a URL's /N
}

// parse reads t's socket type, type and URL, without touching the network
// or the file system. Its errors name the setting at fault.
func (t Target) parse() (endpoint, error) {
	ep := endpoint{socket: strings.ToLower(strings.TrimSpace(t.SocketType)), kind: strings.ToLower(strings.TrimSpace(t.Type))}
	if ep.socket == "" {
		ep.socket = SocketTCP
	}
	if ep.kind == "" {
		ep.kind = TypeSingle
	}
	switch ep.socket {
	case SocketTCP, SocketUnix:
	default:
		return ep, fmt.Errorf("%s_SOCKET_TYPE=%q: want tcp or unix", t.prefix(), t.SocketType)
	}
	switch ep.kind {
	case TypeSingle, TypeSentinel, TypeCluster:
	default:
		return ep, fmt.Errorf("%s_TYPE=%q: want single, sentinel or cluster", t.prefix(), t.Type)
	}
	parts, err := t.urlParts()
	if err != nil {
		return ep, err
	}
	if ep.socket == SocketUnix {
		return t.parseUnix(ep, parts)
	}
	if ep.kind == TypeSentinel {
		if len(parts) < 2 {
			return ep, t.urlError("sentinel wants the master's name, then the sentinels: mymaster,host:port,host:port")
		}
		ep.masterSet, parts = parts[0], parts[1:]
		if strings.Contains(ep.masterSet, ":") {
			return ep, t.urlError("sentinel wants the master's name first (mymaster,host:port,…), not the address " + ep.masterSet)
		}
	}
	if ep.kind == TypeSingle && len(parts) > 1 {
		return ep, t.urlError("single takes one address; for several seeds of a cluster set " + t.prefix() + "_TYPE=cluster")
	}
	if err := t.parseAddrs(&ep, parts); err != nil {
		return ep, err
	}
	if ep.kind == TypeSentinel && ep.hasCreds {
		return ep, t.urlError(fmt.Sprintf("the sentinels' URLs carry no credentials here: set %s_AUTH for the master and %s_SENTINEL_AUTH for the sentinels", t.prefix(), t.prefix()))
	}
	if ep.kind == TypeCluster && ep.db != 0 {
		return ep, t.urlError(fmt.Sprintf("a cluster has only database 0, not %d", ep.db))
	}
	return ep, nil
}

// urlParts splits the URL at commas, refusing an empty one or an empty
// part.
func (t Target) urlParts() ([]string, error) {
	if strings.TrimSpace(t.URL) == "" {
		return nil, fmt.Errorf("%s_URL is empty: want host:port, a redis:// or rediss:// URL, or a socket path", t.prefix())
	}
	parts := strings.Split(t.URL, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" {
			return nil, t.urlError("an empty address between commas")
		}
	}
	return parts, nil
}

// parseUnix reads the one socket path of a unix target.
func (t Target) parseUnix(ep endpoint, parts []string) (endpoint, error) {
	if ep.kind != TypeSingle {
		return ep, fmt.Errorf("%s_SOCKET_TYPE=unix: only %s_TYPE=single connects over a unix socket, not %s", t.prefix(), t.prefix(), ep.kind)
	}
	if len(parts) != 1 {
		return ep, t.urlError("a unix socket takes one path")
	}
	path := parts[0]
	if strings.HasPrefix(path, "unix://") {
		u, err := url.Parse(path)
		if err != nil {
			return ep, t.urlError(redactedError(err))
		}
		path = u.Path
	}
	if !strings.HasPrefix(path, "/") {
		return ep, t.urlError("a unix socket's path must be absolute")
	}
	ep.addrs = []string{path}
	return ep, nil
}

// parseAddrs reads each host:port or URL into ep, refusing URLs that
// disagree on TLS, credentials or database.
func (t Target) parseAddrs(ep *endpoint, parts []string) error {
	for i, p := range parts {
		a, err := t.parseAddr(p)
		if err != nil {
			return err
		}
		if i > 0 && (a.tls != ep.tls || a.hasCreds != ep.hasCreds || a.user != ep.user || a.password != ep.password || a.db != ep.db) {
			return t.urlError("its URLs disagree on scheme, credentials or database")
		}
		ep.tls, ep.hasCreds, ep.user, ep.password, ep.db = a.tls, a.hasCreds, a.user, a.password, a.db
		ep.addrs = append(ep.addrs, a.addrs[0])
	}
	return nil
}

// parseAddr reads one host:port, or one redis:// or rediss:// URL (port
// 6379 when it has none, database from its path).
func (t Target) parseAddr(p string) (endpoint, error) {
	var ep endpoint
	if !strings.Contains(p, "://") {
		hp, err := hostPort(p, "")
		if err != nil {
			return ep, t.urlError(err.Error())
		}
		ep.addrs = []string{hp}
		return ep, nil
	}
	u, err := url.Parse(p)
	if err != nil {
		return ep, t.urlError(redactedError(err))
	}
	switch strings.ToLower(u.Scheme) {
	case "redis":
	case "rediss":
		ep.tls = true
	default:
		return ep, t.urlError(fmt.Sprintf("scheme %q: want redis:// or rediss:// (or %s_SOCKET_TYPE=unix and a path)", u.Scheme, t.prefix()))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return ep, t.urlError("URL options (?…) are not read: use the " + t.prefix() + "_* settings")
	}
	hp, err := hostPort(u.Host, "6379")
	if err != nil {
		return ep, t.urlError(err.Error())
	}
	ep.addrs = []string{hp}
	if u.User != nil {
		ep.hasCreds = true
		ep.user = u.User.Username()
		ep.password, _ = u.User.Password()
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return ep, t.urlError(fmt.Sprintf("path %q: want /N, a database number", u.Path))
		}
		ep.db = n
	}
	return ep, nil
}

// hostPort checks host:port, with def as the port when the address has
// none ("" requires one).
func hostPort(a, def string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		if def == "" || strings.Count(a, ":") > 0 && !strings.HasPrefix(a, "[") {
			return "", fmt.Errorf("address %q: want host:port", a)
		}
		host, port = strings.Trim(a, "[]"), def
	}
	if host == "" {
		return "", fmt.Errorf("address %q: no host", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("address %q: want a port in [1,65535]", a)
	}
	return net.JoinHostPort(host, port), nil
}

// splitAuth reads password or user:password, split at the first colon.
func splitAuth(auth string) (user, password string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// credentials returns the user and password for the master or the nodes:
// _AUTH, or the URL's user info; both set is an error.
func (t Target) credentials(ep endpoint) (user, password string, err error) {
	if t.Auth != "" && ep.hasCreds {
		return "", "", fmt.Errorf("%s_AUTH and the credentials in %s_URL are both set: keep one", t.prefix(), t.prefix())
	}
	if t.Auth != "" {
		user, password = splitAuth(t.Auth)
		return user, password, nil
	}
	return ep.user, ep.password, nil
}

func (t Target) prefix() string {
	if t.Setting == "" {
		return "REDIS"
	}
	return t.Setting
}

// urlError is an error about the URL, which it names redacted.
func (t Target) urlError(why string) error {
	return fmt.Errorf("%s_URL=%q: %s", t.prefix(), redactURL(t.URL), why)
}

// redactedError returns err's text with the URL in it, if any, replaced:
// url.Parse's errors quote the URL, password included.
func redactedError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "not a URL"
}
