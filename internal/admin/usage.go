package admin

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// usageOpts are the flags of usage list and usage summary.
type usageOpts struct {
	window, since string
	at            string // usage top: the window holding it
	n             int    // usage top: the entities ranked
}

var usageFlags = []flagSpec{
	{"entity", "E", "the entity whose usage to show (required): its id, as entity create names it", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.entity, "entity", "", "") }},
	{"resource", "R", "one resource only (default: every resource the entity used)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.resource, "resource", "", "") }},
	{"window", "W", "hourly, daily (default) or monthly snapshots", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.usage.window, "window", string(Daily), "") }},
	{"since", "T", "from when: a time (2026-11-26T14:00:00Z), a date (2026-11-26) or an age (36h, 7d); default 24 hours, 30 days or 12 months ago by window", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.usage.since, "since", "", "") }},
	{"o", "FORMAT", "table (default), json or chart (a bar per row, scaled to the largest)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.output, "o", "table", "") }},
}

var usageGroup = &group{name: "usage", summary: "DynamoDB, Redis: what an entity consumed, per hour, day or month", job: JobUsage, verbs: []*verb{{
	name: "list", synopsis: "-entity E", summary: "one row per window, resource and limit",
	about: "Prints the usage snapshots of entity E in each window since T: the\n" +
		"tokens each limit of each resource consumed in it (consumes and charges\n" +
		"of admitted requests, less refunds; a refused request counts nothing).\n" +
		"Every level of a hierarchy is its own entity. The aggregator (the Lambda,\n" +
		"or ratelimit aggregator) writes the snapshots from the table's stream,\n" +
		"usually within seconds; they expire USAGE_RETENTION after their window.",
	flags:    usageFlags,
	check:    checkUsage,
	examples: []string{"ratelimit usage list -entity acme -window hourly -since 6h", "ratelimit usage list -entity acme -resource gpt-4 -o json"},
	run:      runUsageList,
}, {
	name: "summary", synopsis: "-entity E", summary: "totals per resource and limit since T",
	about: "Adds up the usage snapshots of entity E since T (of the window given:\n" +
		"since the start of the window holding T) into one total per resource\n" +
		"and limit, with the number of windows that had usage.",
	flags:    usageFlags,
	check:    checkUsage,
	examples: []string{"ratelimit usage summary -entity acme -window monthly -since 2026-01-01", "ratelimit usage summary -entity acme -o chart"},
	run:      runUsageSummary,
}, usageTopVerb}}

func checkUsage(o *opts, _ []string) error {
	if o.entity == "" {
		return fmt.Errorf("missing -entity E")
	}
	if w := Window(o.usage.window); w != Hourly && w != Daily && w != Monthly {
		return fmt.Errorf("-window %q: want hourly, daily or monthly", o.usage.window)
	}
	switch o.output {
	case "table", "json", "chart":
	default:
		return fmt.Errorf("-o %q: want table, json or chart", o.output)
	}
	if _, err := parseSince(o.usage.since, Window(o.usage.window), time.Now()); err != nil {
		return err
	}
	return nil
}

// parseSince reads -since: a time, a date, an age before now, or, when
// empty, a default by window.
func parseSince(s string, w Window, now time.Time) (time.Time, error) {
	if s == "" {
		switch w {
		case Hourly:
			return now.Add(-24 * time.Hour), nil
		case Monthly:
			return now.AddDate(0, -12, 0), nil
		}
		return now.AddDate(0, 0, -30), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.UTC); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("-since %q: want a time (2026-11-26T14:00:00Z), a date (2026-11-26) or an age (36h, 7d)", s)
}

// usageRow is one line of usage: a window's (list) or a total (summary).
type usageRow struct {
	Window      string `json:"window,omitempty"` // the window's start, RFC 3339 (list)
	Resource    string `json:"resource"`
	Limit       string `json:"limit"`
	Tokens      string `json:"tokens"`
	Millitokens int64  `json:"millitokens"`
	Windows     int    `json:"windows,omitempty"` // windows with usage (summary)
}

// usageSnapshots reads the snapshots the flags name.
func usageSnapshots(ctx context.Context, e *cmdEnv) ([]UsageSnapshot, error) {
	w := Window(e.opts.usage.window)
	since, err := parseSince(e.opts.usage.since, w, time.Now())
	if err != nil {
		return nil, err
	}
	return e.st.Usage.Usage(ctx, e.opts.ns, e.opts.entity, e.opts.resource, w, since)
}

func runUsageList(ctx context.Context, e *cmdEnv, _ []string) error {
	snaps, err := usageSnapshots(ctx, e)
	if err != nil {
		return err
	}
	return writeUsage(e.out, e.opts.output, listRows(snaps), fmt.Sprintf("entity %q: no %s usage since then", e.opts.entity, e.opts.usage.window))
}

func runUsageSummary(ctx context.Context, e *cmdEnv, _ []string) error {
	snaps, err := usageSnapshots(ctx, e)
	if err != nil {
		return err
	}
	return writeUsage(e.out, e.opts.output, summaryRows(snaps), fmt.Sprintf("entity %q: no %s usage since then", e.opts.entity, e.opts.usage.window))
}

// listRows is one row per snapshot and limit, oldest first.
func listRows(snaps []UsageSnapshot) []usageRow {
	var rows []usageRow
	for _, sn := range snaps {
		for _, l := range sortedKeys(sn.Limits) {
			rows = append(rows, usageRow{Window: sn.Start.Format(time.RFC3339), Resource: sn.Resource, Limit: l, Millitokens: sn.Limits[l], Tokens: formatTokens(sn.Limits[l])})
		}
	}
	return rows
}

// summaryRows is one row per resource and limit: the sum of its snapshots.
func summaryRows(snaps []UsageSnapshot) []usageRow {
	index := map[[2]string]*usageRow{}
	var rows []*usageRow
	for _, sn := range snaps {
		for l, v := range sn.Limits {
			r := index[[2]string{sn.Resource, l}]
			if r == nil {
				r = &usageRow{Resource: sn.Resource, Limit: l}
				index[[2]string{sn.Resource, l}] = r
				rows = append(rows, r)
			}
			r.Millitokens += v
			if v != 0 {
				r.Windows++
			}
		}
	}
	slices.SortFunc(rows, func(a, b *usageRow) int {
		return strings.Compare(a.Resource+"\x00"+a.Limit, b.Resource+"\x00"+b.Limit)
	})
	out := make([]usageRow, len(rows))
	for i, r := range rows {
		r.Tokens = formatTokens(r.Millitokens)
		out[i] = *r
	}
	return out
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// formatTokens writes millitokens as tokens, with the decimals needed.
func formatTokens(mt int64) string {
	s := strconv.FormatFloat(float64(mt)/float64(tokenbucket.PerToken), 'f', 3, 64)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// writeUsage writes rows as format says; none is said in words (an empty
// array in JSON).
func writeUsage(w io.Writer, format string, rows []usageRow, none string) error {
	if format == "json" {
		if rows == nil {
			rows = []usageRow{}
		}
		return writeJSON(w, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, none)
		return err
	}
	if format == "chart" {
		return writeChart(w, rows)
	}
	width := len("TOKENS") // tokens align right, the rest left
	for _, r := range rows {
		width = max(width, len(r.Tokens))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	list := rows[0].Window != ""
	if list {
		fmt.Fprintf(tw, "WINDOW\tRESOURCE\tLIMIT\t%*s\n", width, "TOKENS")
	} else {
		fmt.Fprintf(tw, "RESOURCE\tLIMIT\t%*s\tWINDOWS\n", width, "TOKENS")
	}
	for _, r := range rows {
		if list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%*s\n", r.Window, r.Resource, r.Limit, width, r.Tokens)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%*s\t%7d\n", r.Resource, r.Limit, width, r.Tokens, r.Windows)
		}
	}
	return tw.Flush()
}

// chartWidth is the longest bar of a chart, in cells.
const chartWidth = 40

// writeChart draws one bar per row, scaled to the largest of the rows of
// the same limit (limits of different units do not share a scale).
func writeChart(w io.Writer, rows []usageRow) error {
	top := map[string]int64{}
	for _, r := range rows {
		top[r.Limit] = max(top[r.Limit], r.Millitokens)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for _, r := range rows {
		label := r.Resource + " " + r.Limit
		if r.Window != "" {
			label = r.Window + " " + label
		}
		n := 0
		if top[r.Limit] > 0 && r.Millitokens > 0 {
			n = max(1, int(float64(r.Millitokens)/float64(top[r.Limit])*chartWidth+0.5))
		}
		fmt.Fprintf(tw, "%s\t%s %s\n", label, strings.Repeat("█", n), r.Tokens)
	}
	return tw.Flush()
}
