package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// DefaultTop is how many entities usage top ranks unless -n says.
const DefaultTop = 10

var usageTopVerb = &verb{
	name: "top", synopsis: "-resource R", summary: "the entities that consumed most of a resource in one window",
	about: "Ranks the entities that consumed most of resource R (of limit L, or of\n" +
		"every limit added up) in the hourly, daily or monthly window holding T\n" +
		"(default: now), most first, the first N. The store keeps usage by\n" +
		"entity, so it reads every entity's snapshot of that window: DynamoDB\n" +
		"scans the table (its cost is the table's size, 128 read units a MB, at\n" +
		"most 100 MB), Redis SCANs every master (at most a million keys each).\n" +
		"When it stopped at that bound the ranking is of the entities it read,\n" +
		"and it says so.",
	flags: []flagSpec{
		{"resource", "R", "the resource whose consumers to rank (required)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.resource, "resource", "", "") }},
		{"limit", "L", "one limit only (default: every limit of the resource, added up)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.limit, "limit", "", "") }},
		{"window", "W", "hourly, daily (default) or monthly", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.usage.window, "window", string(Daily), "") }},
		{"at", "T", "the window holding T: a time, a date or an age, as -since takes (default now)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.usage.at, "at", "", "") }},
		{"n", "N", "how many entities to rank (default 10)", func(fs *flag.FlagSet, o *opts) { fs.IntVar(&o.usage.n, "n", DefaultTop, "") }},
		{"o", "FORMAT", "table (default) or json", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.output, "o", "table", "") }},
	},
	check:    checkUsageTop,
	examples: []string{"ratelimit usage top -resource gpt-4 -limit tpm -window daily", "ratelimit usage top -resource gpt-4 -window hourly -at 2026-11-26T14:00:00Z -n 3 -o json"},
	run:      runUsageTop,
}

func checkUsageTop(o *opts, _ []string) error {
	if o.resource == "" {
		return errors.New("missing -resource R: the resource whose consumers to rank")
	}
	if w := Window(o.usage.window); w != Hourly && w != Daily && w != Monthly {
		return fmt.Errorf("-window %q: want hourly, daily or monthly", o.usage.window)
	}
	if o.usage.n < 1 {
		return fmt.Errorf("-n %d: want 1 or more", o.usage.n)
	}
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("-o %q: want table or json", o.output)
	}
	_, err := topAt(o.usage.at)
	return err
}

// topAt reads -at: a time, a date or an age before now (now when empty).
func topAt(s string) (time.Time, error) {
	if s == "" {
		return time.Now(), nil
	}
	t, err := parseSince(s, Daily, time.Now())
	if err != nil {
		return t, errors.New(strings.Replace(err.Error(), "-since", "-at", 1))
	}
	return t, nil
}

// topConsumer is one row of usage top.
type topConsumer struct {
	Rank        int    `json:"rank"`
	Entity      string `json:"entity"`
	Tokens      string `json:"tokens"`
	Millitokens int64  `json:"millitokens"`
}

// topAnswer is usage top's JSON.
type topAnswer struct {
	Resource  string        `json:"resource"`
	Limit     string        `json:"limit,omitempty"`
	Window    Window        `json:"window"`
	Start     string        `json:"start"` // the window's start, RFC 3339
	Complete  bool          `json:"complete"`
	Entities  int           `json:"entities"` // the entities with usage read
	Consumers []topConsumer `json:"consumers"`
}

func runUsageTop(ctx context.Context, e *cmdEnv, _ []string) error {
	at, err := topAt(e.opts.usage.at)
	if err != nil {
		return err
	}
	w := Window(e.opts.usage.window)
	snaps, complete, err := e.st.Usage.WindowUsage(ctx, e.opts.ns, e.opts.resource, w, at)
	if err != nil {
		return err
	}
	ans := rankConsumers(snaps, e.opts.limit, e.opts.usage.n)
	ans.Resource, ans.Limit, ans.Window, ans.Complete = e.opts.resource, e.opts.limit, w, complete
	ans.Start = usage.Window(w).Start(at).Format(time.RFC3339) // the same windows on every store
	if e.opts.output == "json" {
		return writeJSON(e.out, ans)
	}
	if !complete {
		fmt.Fprintf(e.errOut, "the store's bound was reached: ranked the %d entities read, not every one\n", ans.Entities)
	}
	if len(ans.Consumers) == 0 {
		_, err := fmt.Fprintf(e.out, "resource %q: no %s usage in the window of %s\n", ans.Resource, w, ans.Start)
		return err
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tENTITY\tTOKENS")
	for _, c := range ans.Consumers {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", c.Rank, c.Entity, c.Tokens)
	}
	return tw.Flush()
}

// rankConsumers adds up each entity's snapshots (of limit, or of every
// limit when empty) and ranks the first n, most first, ties by entity.
func rankConsumers(snaps []UsageSnapshot, limit string, n int) topAnswer {
	totals := map[string]int64{}
	for _, sn := range snaps {
		for l, v := range sn.Limits {
			if limit == "" || l == limit {
				totals[sn.Entity] += v
			}
		}
	}
	rows := make([]topConsumer, 0, len(totals))
	for e, v := range totals {
		if v > 0 {
			rows = append(rows, topConsumer{Entity: e, Millitokens: v, Tokens: formatTokens(v)})
		}
	}
	slices.SortFunc(rows, func(a, b topConsumer) int {
		if a.Millitokens != b.Millitokens {
			if a.Millitokens > b.Millitokens {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Entity, b.Entity)
	})
	ans := topAnswer{Entities: len(rows), Consumers: rows[:min(n, len(rows))]}
	for i := range ans.Consumers {
		ans.Consumers[i].Rank = i + 1
	}
	return ans
}
