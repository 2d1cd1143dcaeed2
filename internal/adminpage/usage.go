package adminpage

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// usageView is the page's usage section: the form's values, the chart's
// bars, and the top consumers of the limit in the current window.
type usageView struct {
	Entity, Resource, Limit, Window, Since string
	Top                                    string // the entities ranked, comma-separated
	Asked                                  bool
	Ranking                                bool // the top consumers are shown
	Err                                    string
	Bars                                   []bar
	Chart                                  chart
	Ranked                                 []consumer
	RankErr                                string
	Period                                 string
}

// bar is one window of the chart.
type bar struct {
	Window string // its start
	Tokens string
	Value  float64
	X, Y   int // the bar's place in the SVG
	W, H   int
	LabelX int
}

// chart is the SVG's size and axis.
type chart struct {
	Width, Height, Base int
	Max                 string
}

// consumer is one row of the top consumers.
type consumer struct {
	Entity string
	Tokens string
	value  float64
}

// usageRow is one row of usage list's and summary's JSON.
type usageRow struct {
	Window      string `json:"window"`
	Resource    string `json:"resource"`
	Limit       string `json:"limit"`
	Tokens      string `json:"tokens"`
	Millitokens int64  `json:"millitokens"`
}

// usage is the usage section for the query q, from usage list and usage
// summary.
func (p *Page) usage(q url.Values, now time.Time) usageView {
	v := usageView{Entity: q.Get("entity"), Resource: q.Get("resource"), Limit: q.Get("limit"), Window: q.Get("window"), Since: q.Get("since"), Top: q.Get("top")}
	if v.Window == "" {
		v.Window = "hourly"
	}
	if v.Since == "" {
		v.Since = "24h"
	}
	if v.Entity == "" {
		if v.Resource != "" || v.Top != "" {
			v.Ranking = true
			v.Ranked, v.RankErr, v.Period = p.top(v, now)
		}
		return v
	}
	v.Asked, v.Ranking = true, true
	call := url.Values{"entity": {v.Entity}, "window": {v.Window}, "since": {v.Since}}
	if v.Resource != "" {
		call.Set("resource", v.Resource)
	}
	var rows []usageRow
	if err := p.call("/admin/usage/list", call, &rows); err != nil {
		v.Err = err.Error()
		return v
	}
	byWindow := map[string]float64{}
	var windows []string
	for _, r := range rows {
		if v.Limit != "" && r.Limit != v.Limit {
			continue
		}
		if _, ok := byWindow[r.Window]; !ok {
			windows = append(windows, r.Window)
		}
		byWindow[r.Window] += float64(r.Millitokens) / 1000
	}
	slices.Sort(windows)
	v.Chart, v.Bars = bars(windows, byWindow)
	v.Ranked, v.RankErr, v.Period = p.top(v, now)
	return v
}

// bars lays out one bar per window, scaled to the largest.
func bars(windows []string, values map[string]float64) (chart, []bar) {
	c := chart{Width: 640, Height: 220, Base: 190}
	top := 0.0
	for _, w := range windows {
		top = max(top, values[w])
	}
	c.Max = num(top)
	if len(windows) == 0 {
		return c, nil
	}
	step := (c.Width - 40) / len(windows)
	out := make([]bar, 0, len(windows))
	for i, w := range windows {
		h := 0
		if top > 0 {
			h = int(values[w] / top * 170)
		}
		x := 40 + i*step
		out = append(out, bar{Window: w, Tokens: num(values[w]), Value: values[w], X: x + 2, Y: c.Base - h, W: max(step-4, 1), H: h, LabelX: x + step/2})
	}
	return c, out
}

// top ranks the entities of v.Top by what they consumed of the resource
// and limit in the current window (its hour, or day); without v.Top, every
// entity the store's usage history holds for it (usage top).
func (p *Page) top(v usageView, now time.Time) ([]consumer, string, string) {
	start := now.UTC().Truncate(time.Hour)
	if v.Window == "daily" {
		y, m, d := now.UTC().Date()
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	period := "since " + start.Format(time.RFC3339)
	if v.Top == "" {
		return p.topOfStore(v, start, period)
	}
	entities := strings.Split(v.Top, ",")
	var out []consumer
	for _, e := range entities {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		q := url.Values{"entity": {e}, "window": {v.Window}, "since": {start.Format(time.RFC3339)}}
		if v.Resource != "" {
			q.Set("resource", v.Resource)
		}
		var rows []usageRow
		if err := p.call("/admin/usage/summary", q, &rows); err != nil {
			return out, err.Error(), period
		}
		c := consumer{Entity: e}
		for _, r := range rows {
			if v.Limit == "" || r.Limit == v.Limit {
				c.value += float64(r.Millitokens) / 1000
			}
		}
		c.Tokens = num(c.value)
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b consumer) int {
		switch {
		case a.value > b.value:
			return -1
		case a.value < b.value:
			return 1
		}
		return 0
	})
	return out, "", period
}

// String is a bar's tooltip.
func (b bar) String() string { return fmt.Sprintf("%s: %s", b.Window, b.Tokens) }

// topAnswer is usage top's JSON.
type topAnswer struct {
	Complete  bool `json:"complete"`
	Entities  int  `json:"entities"`
	Consumers []struct {
		Entity      string `json:"entity"`
		Millitokens int64  `json:"millitokens"`
	} `json:"consumers"`
}

// topOfStore ranks the first Consumers entities that consumed most of the
// resource (and limit) in the window starting at start, from usage top:
// every entity the store's history holds, not only those named.
func (p *Page) topOfStore(v usageView, start time.Time, period string) ([]consumer, string, string) {
	if v.Resource == "" {
		return nil, "name a resource to rank every entity that used it (or name entities in top=)", period
	}
	q := url.Values{"resource": {v.Resource}, "window": {v.Window}, "at": {start.Format(time.RFC3339)}, "n": {fmt.Sprint(Consumers)}}
	if v.Limit != "" {
		q.Set("limit", v.Limit)
	}
	var ans topAnswer
	if err := p.call("/admin/usage/top", q, &ans); err != nil {
		return nil, err.Error(), period
	}
	out := make([]consumer, 0, len(ans.Consumers))
	for _, c := range ans.Consumers {
		f := float64(c.Millitokens) / 1000
		out = append(out, consumer{Entity: c.Entity, Tokens: num(f), value: f})
	}
	period += fmt.Sprintf(", of %d entities with usage", ans.Entities)
	if !ans.Complete {
		period += " (the store's scan stopped at its bound: of those it read)"
	}
	return out, "", period
}

// Consumers is how many entities the top consumers rank when top= names
// none.
const Consumers = 10
