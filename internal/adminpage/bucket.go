package adminpage

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// bucketView is the page's bucket section: the form's values, each level
// of the chain, and the commands that reset it.
type bucketView struct {
	Domain, Descriptor, Namespace string
	Asked                         bool
	Err                           string
	Levels                        []levelView
	Command, Call                 string // the reset, on the command line and over the admin API
}

// levelView is one level of a bucket's chain.
type levelView struct {
	Level            int
	Namespace        string
	Entity, Resource string
	Decided          string
	Local            string // "true" or "false": whether the replica decides it locally now; "" unknown
	Limits           []limitView
	ShardCount       int
}

// limitView is one limit of a level: tokens and capacity, or for a
// budget in dollars its spent and remaining amounts and its period's end.
type limitView struct {
	Name                        string
	Tokens, Capacity, Remaining string
	Spent                       string // a budget in dollars
	Money                       bool
	Reset                       string // when it is full again, or a budget's period end in its zone
	Refill                      string
}

// shownBucket is one level of bucket show's JSON.
type shownBucket struct {
	Level      int       `json:"level"`
	Namespace  string    `json:"namespace"`
	Entity     string    `json:"entity"`
	Resource   string    `json:"resource"`
	ShardCount int       `json:"shard_count"`
	At         time.Time `json:"at"`
	// DecidedLocally is whether the replica decides the level on its own
	// buckets now (nil: the store does not say).
	DecidedLocally *bool `json:"decided_locally"`
	Limits         []struct {
		Name     string  `json:"name"`
		Tokens   float64 `json:"tokens"`
		Capacity float64 `json:"capacity"`
		Refill   string  `json:"refill"`
		FullInMs int64   `json:"full_in_ms"`
	} `json:"limits"`
}

// bucket is the bucket section for domain and descriptor, from bucket
// show.
func (p *Page) bucket(r *http.Request, domain, desc, ns string, now time.Time) bucketView {
	v := bucketView{Domain: domain, Descriptor: desc, Namespace: ns}
	if domain == "" && desc == "" {
		return v
	}
	v.Asked = true
	q := url.Values{"domain": {domain}, "descriptor": {desc}}
	if ns != "" {
		q.Set("namespace", ns)
	}
	var shown []shownBucket
	if err := p.call("/admin/bucket/show", q, &shown); err != nil {
		v.Err = err.Error()
		return v
	}
	limits := p.configured(domain, desc)
	for _, b := range shown {
		lv := levelView{Level: b.Level, Namespace: b.Namespace, Entity: b.Entity, Resource: b.Resource, ShardCount: b.ShardCount, Decided: p.decided(b.DecidedLocally)}
		if b.DecidedLocally != nil {
			lv.Local = fmt.Sprint(*b.DecidedLocally)
		}
		for _, l := range b.Limits {
			lv.Limits = append(lv.Limits, limitOf(l.Name, l.Tokens, l.Capacity, l.Refill, l.FullInMs, limits[l.Name], b.At))
		}
		if len(b.Limits) == 0 {
			lv.Limits = append(lv.Limits, limitView{Name: "—", Remaining: "full", Reset: "no item: never written, or refilled"})
		}
		v.Levels = append(v.Levels, lv)
	}
	base := "http://" + r.Host
	v.Command = fmt.Sprintf("ratelimit bucket reset -domain %s -descriptor %s -admin_url %s", shellQuote(domain), shellQuote(desc), base)
	v.Call = "curl -s -XPOST '" + base + "/admin/bucket/reset?" + strings.ReplaceAll(q.Encode(), "'", "%27") + "&o=table'"
	return v
}

// limitOf is one limit as the page shows it; conf is its configured limit
// (its unit and calendar), when the live configuration names it.
func limitOf(name string, tokens, capacity float64, refill string, fullInMs int64, conf descriptors.Limit, at time.Time) limitView {
	v := limitView{Name: name, Refill: refill, Money: conf.Money}
	remaining := math.Max(tokens, 0)
	if conf.Money {
		// A limit in dollars holds micro-dollars.
		usd := func(f float64) string { return descriptors.FormatUSD(int64(math.Round(f))) }
		v.Tokens, v.Capacity, v.Remaining, v.Spent = usd(tokens), usd(capacity), usd(remaining), usd(capacity-tokens)
	} else {
		v.Tokens, v.Capacity, v.Remaining = num(tokens), num(capacity), num(math.Floor(remaining))
	}
	switch c := conf.Bucket.Calendar; {
	case !c.IsZero():
		v.Reset = periodEnd(c, at)
	case fullInMs > 0:
		v.Reset = "full in " + (time.Duration(fullInMs) * time.Millisecond).Round(time.Second).String()
	default:
		v.Reset = "full"
	}
	return v
}

// periodEnd is the end of the calendar period holding at, in its zone.
func periodEnd(c tokenbucket.Calendar, at time.Time) string {
	end := time.UnixMilli(c.Start(c.Index(at.UnixMilli()) + 1))
	if loc, err := time.LoadLocation(c.Zone()); err == nil {
		end = end.In(loc)
	}
	return "period ends " + end.Format("2006-01-02 15:04 MST") + " (" + c.Zone() + ")"
}

// configured is the limits the live configuration gives the request's
// levels, by name.
func (p *Page) configured(domain, desc string) map[string]descriptors.Limit {
	out := map[string]descriptors.Limit{}
	if p.o.Live == nil {
		return out
	}
	cfg := p.o.Live()
	if cfg == nil {
		return out
	}
	var entries []descriptors.Entry
	for _, kv := range strings.Split(desc, ",") {
		k, val, _ := strings.Cut(kv, "=")
		entries = append(entries, descriptors.Entry{Key: k, Value: val})
	}
	m, ok := cfg.Match(domain, entries)
	if !ok {
		return out
	}
	add := func(ls []descriptors.Limit) {
		for _, l := range ls {
			if _, seen := out[l.ID]; !seen {
				out[l.ID] = l
			}
		}
	}
	add(m.Rule.Limits)
	for _, t := range m.Tiers() {
		add(t.Limits)
	}
	return out
}

// decided says where a bucket's level is decided: by the store, and on a
// shared store whether this replica decides it locally now (local, from
// bucket show; nil when the store does not say).
func (p *Page) decided(local *bool) string {
	shared := "on the table"
	switch p.o.Store {
	case "memory":
		return "locally: the embedded store decides in this process"
	case "redis":
		shared = "on Redis"
	}
	switch {
	case local == nil:
		if n := p.gauge("ratelimit_degraded_items"); n > 0 {
			return fmt.Sprintf("%s; %d items are decided locally on this replica now", shared, int64(n))
		}
		return shared
	case *local:
		return "locally on this replica now: the store failed this item (ON_UNAVAILABLE=local); it goes back " + shared + " once what it admitted meanwhile is repaid"
	}
	return shared + ": this replica does not decide it locally now"
}

func num(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.3f", f)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
