package redisstore

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// windows are the usage windows holding an instant (unix ms, UTC): the
// start of its hour, day and month, the month's end, and when each
// window's keys expire (its end and the retention).
type windows struct {
	hour, day, month, monthEnd int64
	hourExp, dayExp, monthExp  int64
}

// windowsAt returns the windows holding ms, kept retention past their end.
func windowsAt(ms int64, retention time.Duration) *windows {
	t := time.UnixMilli(ms).UTC()
	hour := t.Truncate(time.Hour)
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	month := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	next := month.AddDate(0, 1, 0)
	r := retention.Milliseconds()
	return &windows{
		hour: hour.UnixMilli(), day: day.UnixMilli(), month: month.UnixMilli(), monthEnd: next.UnixMilli(),
		hourExp: hour.Add(time.Hour).UnixMilli() + r, dayExp: day.AddDate(0, 0, 1).UnixMilli() + r, monthExp: next.UnixMilli() + r,
	}
}

// header is the windows as the script reads them (ARGV[2]).
func (w *windows) header() string {
	f := func(v int64) string { return strconv.FormatInt(v, 10) }
	return f(w.hour) + "," + f(w.hourExp) + "," + f(w.day) + "," + f(w.dayExp) + "," + f(w.month) + "," + f(w.monthEnd) + "," + f(w.monthExp)
}

// Window kinds of the usage history.
const (
	Hourly  = 'h'
	Daily   = 'd'
	Monthly = 'm'
)

// Snapshot is what an entity consumed of a resource in one window, by
// limit, in millitokens.
type Snapshot struct {
	Namespace, Entity, Resource string
	Window                      byte
	Start                       time.Time // UTC
	Limits                      map[string]int64
}

// maxWindows bounds the windows one Usage call reads.
const maxWindows = 24 * 62

// Usage returns the usage snapshots of entity in namespace ns (the
// deployment's when empty) of resource (every resource it used when
// empty) in windows of kind w from the one holding since to the one
// holding now, oldest first; windows with no usage are left out.
func (s *Store) Usage(ctx context.Context, ns, entity, resource string, w byte, since time.Time) ([]Snapshot, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	k := cascade.Key{Namespace: ns, Entity: entity}
	resources := []string{resource}
	if resource == "" {
		keys, err := s.chains.itemKeys(ctx, k)
		if err != nil {
			return nil, err
		}
		resources, err = c.Do(ctx, c.B().Smembers().Key(keys.resources).Build()).AsStrSlice()
		if err != nil {
			return nil, classify(err)
		}
		sort.Strings(resources)
	}
	starts := windowStarts(w, since, time.UnixMilli(s.estimate()))
	var out []Snapshot
	for _, start := range starts {
		cmds := make(rueidis.Commands, 0, len(resources))
		for _, r := range resources {
			k.Resource = r
			keys, err := s.chains.itemKeys(ctx, k)
			if err != nil {
				return nil, err
			}
			cmds = append(cmds, c.B().Hgetall().Key(usageKey(keys.usage, w, start.UnixMilli())).Build())
		}
		for i, res := range c.DoMulti(ctx, cmds...) {
			m, err := res.AsIntMap()
			if err != nil {
				return nil, classify(err)
			}
			if len(m) == 0 {
				continue
			}
			out = append(out, Snapshot{Namespace: s.keys.namespace(k), Entity: entity, Resource: resources[i], Window: w, Start: start, Limits: m})
		}
	}
	return out, nil
}

// windowStarts lists the starts of the windows of kind w from the one
// holding since to the one holding now (at most maxWindows, the latest).
func windowStarts(w byte, since, now time.Time) []time.Time {
	start := func(t time.Time) time.Time {
		t = t.UTC()
		switch w {
		case Hourly:
			return t.Truncate(time.Hour)
		case Monthly:
			return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		}
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	next := func(t time.Time) time.Time {
		switch w {
		case Hourly:
			return t.Add(time.Hour)
		case Monthly:
			return t.AddDate(0, 1, 0)
		}
		return t.AddDate(0, 0, 1)
	}
	var out []time.Time
	for t := start(since); !t.After(now); t = next(t) {
		out = append(out, t)
	}
	if len(out) > maxWindows {
		out = out[len(out)-maxWindows:]
	}
	return out
}
