package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

var (
	bucketArg   = [2]string{"BUCKET", "-entity E -resource R | -domain D -descriptor KEY=VALUE[,KEY=VALUE…]"}
	bucketFlags = []flagSpec{
		{"entity", "E", "the bucket's entity, as 'entity show' and the rules name it (e.g. generic_key=demo, an API key); with a hierarchical rule, the entity followed by '#' and its branch", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.entity, "entity", "", "") }},
		{"resource", "R", "the bucket's resource: the rule's domain, or the resource a stored limit names", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.resource, "resource", "", "") }},
		{"domain", "D", "with -descriptor: the request's domain (the bucket's resource)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.domain, "domain", "", "") }},
		{"descriptor", "KEY=VALUE,…", "with -domain: the request descriptor's entries, in order (the bucket's entity, escaped as the service escapes it)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.descriptor, "descriptor", "", "") }},
		{"config_dir", "DIR", "with -domain and -descriptor: resolve the bucket through the descriptor files of DIR as serve does (its rule, namespace, tiers and limits); default CONFIG_DIR when set", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.configDir, "config_dir", "", "") }},
	}
	flagOutput = flagSpec{"o", "table|json", "the output's format (default table)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.output, "o", "table", "") }}
)

var bucketGroup = &group{name: "bucket", summary: "DynamoDB or admin API: show a bucket without consuming, reset it to full, top a limit up", job: JobBuckets, verbs: []*verb{{
	name: "show", synopsis: "BUCKET", summary: "what a bucket holds now, on every shard and every level of its chain",
	about: "Reads the bucket's items (strongly consistent, every shard) and prints\n" +
		"what each limit holds now: its tokens of its capacity, the time until it\n" +
		"is full, and the tokens consumed on it so far (the usage counter), in all\n" +
		"and per shard when the bucket has several. For an entity in a hierarchy,\n" +
		"the buckets of the ancestors its debits cascade to follow, one level each,\n" +
		"with the limits stored for them. A read only: it consumes nothing and\n" +
		"writes nothing (one read unit per shard). A bucket without an item is\n" +
		"full: it has never been written, or it expired full.\n\n" +
		"-domain and -descriptor name the bucket of a plain rule as the request\n" +
		"would: the entity is the entries KEY=VALUE joined by '&', each escaped.\n" +
		"With -config_dir (default: CONFIG_DIR when set) the request is matched\n" +
		"against those descriptor files as serve matches it: the rule's\n" +
		"namespace, its share_threshold, and for a hierarchical rule each\n" +
		"configured tier (then, with cascade, the stored ancestors), each with\n" +
		"the rule's limits.",
	args:  argSpec{names: [][2]string{bucketArg}},
	flags: append(append([]flagSpec{}, bucketFlags...), flagOutput),
	check: checkBucket,
	examples: []string{
		"ratelimit bucket show -entity 'generic_key=demo' -resource example",
		"ratelimit bucket show -domain example -descriptor generic_key=demo -o json",
		"ratelimit bucket show -entity key-1 -resource gpt-4 -namespace team-a",
		"ratelimit bucket show -domain example -descriptor generic_key=demo -admin_url http://127.0.0.1:6070",
	},
	run: runBucketShow,
}, {
	name: "reset", synopsis: "BUCKET", summary: "refill every limit of a bucket to its capacity on every shard, audited",
	about: "Refills every limit the bucket's items hold to its capacity, on every\n" +
		"shard, in one DynamoDB transaction with an audit record (action\n" +
		"bucket.reset, under the bucket's entity: 'ratelimit audit list -entity E')\n" +
		"naming -principal and the bucket as it was. Each shard's write is\n" +
		"conditional on the shard count read, so the reset lands on every shard or\n" +
		"none (a shard doubling meanwhile: it reads again). The usage counters are\n" +
		"kept. A bucket without an item is full: nothing is written. With -chain,\n" +
		"the buckets of the ancestors its debits cascade to are reset too, each\n" +
		"in its own transaction (with -config_dir: every tier the rule charges). Replicas that refused the bucket within the last\n" +
		"second may answer from their rejection cache until that refusal's\n" +
		"retry-after (at most a second). Cost: 2 write units per shard and 2 for\n" +
		"the audit record.",
	args: argSpec{names: [][2]string{bucketArg}},
	flags: append(append([]flagSpec{}, bucketFlags...),
		flagSpec{"chain", "", "also reset the buckets of the ancestors the bucket's debits cascade to", func(fs *flag.FlagSet, o *opts) { fs.BoolVar(&o.chain, "chain", false, "") }},
		flagPrincipal, flagOutput),
	check: checkBucket,
	examples: []string{
		"ratelimit bucket reset -entity 'generic_key=demo' -resource example -principal alice",
		"ratelimit bucket reset -entity key-1 -resource gpt-4 -chain",
		"ratelimit bucket reset -domain example -descriptor generic_key=demo -admin_url http://127.0.0.1:6070",
	},
	run: runBucketReset,
}, {
	name: "topup", synopsis: "BUCKET", summary: "credit one limit of a bucket now (a budget: for its current period), audited",
	about: "Credits -amount tokens (or -usd dollars, for a limit in dollars) to the\n" +
		"limit -limit of the bucket, now: for a calendar budget, within its\n" +
		"current period. Never above the limit's capacity: a top-up past full\n" +
		"leaves it full. On DynamoDB the credit is split over the bucket's\n" +
		"shards as their tokens are and written with an audit record (action\n" +
		"bucket.topup, naming -principal and the bucket as it was) in one\n" +
		"transaction; it commutes with the decisions writing meanwhile. On the\n" +
		"embedded store, through the admin API, it is logged. A full limit (a\n" +
		"bucket without an item is full) answers the same on every store,\n" +
		"'LIMIT is full: nothing to top up' (in JSON, reset false). Cost: 2\n" +
		"write units per shard and 2 for the audit record.",
	args: argSpec{names: [][2]string{bucketArg}},
	flags: append(append([]flagSpec{}, bucketFlags...),
		flagSpec{"limit", "NAME", "the limit to credit, as the rule names it (default when unnamed)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.limit, "limit", "", "") }},
		flagSpec{"amount", "N", "tokens to credit (whole, or with up to 3 decimals)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.amount, "amount", "", "") }},
		flagSpec{"usd", "D", "dollars to credit a limit in dollars (up to 6 decimals)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.usd, "usd", "", "") }},
		flagPrincipal, flagOutput),
	check: checkTopUp,
	examples: []string{
		"ratelimit bucket topup -domain llm -descriptor team=ml -config_dir examples/budgets -limit team_month -usd 250 -principal alice",
		"ratelimit bucket topup -entity key-1 -resource gpt-4 -limit tpm -amount 5000",
		"ratelimit bucket topup -domain llm -descriptor team=ml -limit team_month -usd 250 -admin_url http://127.0.0.1:6070",
	},
	run: runBucketTopUp,
}}}

// checkTopUp checks a top-up's bucket, limit and amount.
func checkTopUp(o *opts, args []string) error {
	if err := checkBucket(o, args); err != nil {
		return err
	}
	if o.limit == "" {
		return errors.New("missing -limit: the limit to credit")
	}
	_, err := topUpAmount(o)
	return err
}

// topUpAmount is -amount tokens or -usd dollars in millitokens (a money
// limit's token is a micro-dollar).
func topUpAmount(o *opts) (tokenbucket.Millitokens, error) {
	if (o.amount == "") == (o.usd == "") {
		return 0, errors.New("give -amount N (tokens) or -usd D (dollars), one of them")
	}
	if o.usd != "" {
		micros, ok := descriptors.ParseUSD(o.usd)
		if !ok || micros == 0 {
			return 0, fmt.Errorf("-usd %s: want a positive amount of dollars with at most 6 decimals", o.usd)
		}
		return tokenbucket.Millitokens(micros) * tokenbucket.PerToken, nil
	}
	// Tokens with up to 3 decimals: the decimal grammar of dollars, in
	// millionths, then thousandths.
	_, frac, _ := strings.Cut(o.amount, ".")
	m, ok := descriptors.ParseUSD(o.amount)
	if !ok || m < 1000 || len(frac) > 3 {
		return 0, fmt.Errorf("-amount %s: want a positive number of tokens with at most 3 decimals", o.amount)
	}
	return tokenbucket.Millitokens(m / 1000), nil
}

func runBucketTopUp(ctx context.Context, e *cmdEnv, _ []string) error {
	levels, err := levelsOf(ctx, e, false)
	if err != nil {
		return err
	}
	amount, err := topUpAmount(&e.opts)
	if err != nil {
		return err
	}
	lv := levels[0]
	name := fmt.Sprintf("bucket %q resource %q", lv.key.Entity, lv.key.Resource)
	before, ok, err := e.st.Buckets.TopUp(ctx, lv.key, e.opts.limit, amount, lv.limits)
	if errors.Is(err, ErrNoSuchLimit) {
		held := heldNames(ctx, e, lv)
		if len(held) > 0 {
			return &explained{fmt.Sprintf("%s holds no limit named %q: it holds %s", name, e.opts.limit, strings.Join(held, ", ")), err}
		}
		err, ok = nil, false // never written: full in every limit it will hold
	}
	if err != nil {
		return err
	}
	// Full, with or without an item, on every store: nothing to top up.
	l, held := before.Total()[e.opts.limit]
	ok = ok && !(held && l.Tokens >= l.Limit.Capacity)
	if e.opts.output == "json" {
		return writeJSON(e.out, jsonReset{Bucket: toJSONBucket(0, before), Reset: ok, Principal: e.opts.principal})
	}
	if !ok {
		fmt.Fprintf(e.out, "%s: %s is full: nothing to top up\n", name, e.opts.limit)
		return nil
	}
	by := tokens(amount)
	if e.opts.usd != "" {
		by = dollars(amount)
	}
	fmt.Fprintf(e.out, "%s: %s topped up by %s (was %s), by %s\n", name, e.opts.limit, by, holdings(before), e.opts.principal)
	return nil
}

// heldNames lists the limits lv's bucket holds, for the error of a
// top-up of another: those the configuration names, else those its items
// hold (none: it is full).
func heldNames(ctx context.Context, e *cmdEnv, lv bucketLevel) []string {
	names := make([]string, 0, len(lv.limits))
	for n := range lv.limits {
		names = append(names, n)
	}
	if len(names) == 0 {
		if b, err := e.st.Buckets.Bucket(ctx, lv.key, nil); err == nil {
			for n := range b.Total() {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}

// checkBucket checks that the bucket is named one way, whole.
func checkBucket(o *opts, _ []string) error {
	byKey := o.entity != "" || o.resource != ""
	byRequest := o.domain != "" || o.descriptor != ""
	switch {
	case byKey && byRequest:
		return errors.New("name the bucket by -entity and -resource, or by -domain and -descriptor, not both")
	case !byKey && !byRequest:
		return errors.New("missing BUCKET: name it by -entity E -resource R, or by -domain D -descriptor KEY=VALUE")
	case byKey && (o.entity == "" || o.resource == ""):
		return errors.New("a bucket is named by both -entity and -resource")
	case byRequest && (o.domain == "" || o.descriptor == ""):
		return errors.New("a bucket is named by both -domain and -descriptor")
	case o.configDir != "" && !byRequest:
		return errors.New("-config_dir resolves -domain and -descriptor: name the bucket by them")
	}
	if o.output != "" && o.output != "table" && o.output != "json" {
		return fmt.Errorf("-o %s: want table or json", o.output)
	}
	_, err := bucketKey(o)
	return err
}

// bucketKey is the bucket the flags name. A descriptor's entity is its
// entries as the service writes a plain rule's (descriptors.Match.EntityID).
func bucketKey(o *opts) (cascade.Key, error) {
	if o.domain == "" {
		return cascade.Key{Namespace: o.ns, Entity: o.entity, Resource: o.resource}, nil
	}
	entries, err := descriptorEntries(o.descriptor)
	if err != nil {
		return cascade.Key{}, err
	}
	return cascade.Key{Namespace: o.ns, Entity: descriptors.Match{Entries: entries}.EntityID(), Resource: o.domain}, nil
}

// descriptorEntries parses -descriptor's KEY=VALUE[,KEY=VALUE…].
func descriptorEntries(desc string) ([]descriptors.Entry, error) {
	var entries []descriptors.Entry
	for _, kv := range strings.Split(desc, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-descriptor %q: want KEY=VALUE[,KEY=VALUE…], got %q", desc, kv)
		}
		entries = append(entries, descriptors.Entry{Key: k, Value: v})
	}
	return entries, nil
}

// levelsOf returns the buckets the flags name: with -config_dir (or
// CONFIG_DIR, for -domain and -descriptor), those
// the matching rule charges, as serve resolves them (configured tiers, then
// with cascade the stored ancestors above the top one); otherwise the
// bucket named and, when chain, the stored ancestors its debits cascade to.
func levelsOf(ctx context.Context, e *cmdEnv, chain bool) ([]bucketLevel, error) {
	dir := e.opts.configDir
	if dir == "" && e.opts.domain != "" {
		dir = e.settings.ConfigDirOverride // CONFIG_DIR, as serve reads it
	}
	if e.live != nil && e.opts.domain != "" {
		dir = "the live configuration"
	}
	if dir == "" {
		key, _ := bucketKey(&e.opts)
		if !chain {
			return []bucketLevel{{key: key}}, nil
		}
		return chainOf(ctx, e.st.Buckets, key)
	}
	cfg, err := e.config(dir)
	if err != nil {
		return nil, err
	}
	entries, _ := descriptorEntries(e.opts.descriptor) // checked by checkBucket
	m, ok := cfg.Match(e.opts.domain, entries)
	if !ok {
		return nil, &explained{fmt.Sprintf("no rule of %s matches domain %q descriptor %s: serve answers it OK without a bucket", dir, e.opts.domain, e.opts.descriptor), errNoRule}
	}
	ns := m.Rule.Namespace
	if ns == "" {
		ns = e.opts.ns
	}
	if m.NumTiers() == 0 {
		return []bucketLevel{{key: cascade.Key{Namespace: ns, Entity: m.EntityID(), Resource: e.opts.domain}, limits: configured(m.Rule.Limits), money: inDollars(m.Rule.Limits)}}, nil
	}
	var out []bucketLevel
	for _, t := range m.Tiers() {
		out = append(out, bucketLevel{key: cascade.Key{Namespace: ns, Entity: t.Entity, Resource: t.Resource}, limits: configured(t.Limits), money: inDollars(t.Limits)})
	}
	if !m.Rule.Cascade || !chain {
		return out, nil
	}
	up, err := chainOf(ctx, e.st.Buckets, out[len(out)-1].key)
	if err != nil {
		return nil, err
	}
	return append(out, up[1:]...), nil
}

// config is the descriptor configuration -domain and -descriptor resolve
// through: the serving process's, else that of dir.
func (e *cmdEnv) config(dir string) (*descriptors.Config, error) {
	if e.live != nil {
		if cfg := e.live(); cfg != nil {
			return cfg, nil
		}
		return nil, errors.New("admin: no descriptor configuration loaded yet")
	}
	cfg, err := e.settings.Loader()(dir)
	if err != nil {
		return nil, fmt.Errorf("-config_dir %s: %w", dir, err)
	}
	return cfg, nil
}

// configured returns the bucket limits of a rule's limits by storage name
// (a limit that denies every hit has no bucket).
func configured(ls []descriptors.Limit) map[string]tokenbucket.Limit {
	out := map[string]tokenbucket.Limit{}
	for _, l := range ls {
		if !l.Deny {
			out[l.ID] = l.Bucket
		}
	}
	return out
}

// inDollars names the limits of ls that are in dollars.
func inDollars(ls []descriptors.Limit) map[string]bool {
	var out map[string]bool
	for _, l := range ls {
		if l.Money {
			if out == nil {
				out = map[string]bool{}
			}
			out[l.ID] = true
		}
	}
	return out
}

// bucketLevel is one bucket of a chain: the bucket asked about (level 0)
// or an ancestor its debits cascade to, with the limits stored for it and,
// from the configuration, those in dollars.
type bucketLevel struct {
	key    cascade.Key
	limits map[string]tokenbucket.Limit
	money  map[string]bool
}

// errNoRule is wrapped by the error of a bucket named by a request that
// no rule matches.
var errNoRule = errors.New("no bucket")

// chainOf returns the bucket and the ancestors its debits cascade to.
func chainOf(ctx context.Context, st Buckets, key cascade.Key) ([]bucketLevel, error) {
	out := []bucketLevel{{key: key}}
	anc, err := st.Ancestors(ctx, key, descriptors.MaxChain)
	if err != nil {
		return nil, err
	}
	for _, a := range anc {
		lv := bucketLevel{key: a.Key, limits: map[string]tokenbucket.Limit{}}
		for _, l := range a.Limits {
			lv.limits[l.Name] = l.Bucket
		}
		out = append(out, lv)
	}
	return out, nil
}

func runBucketShow(ctx context.Context, e *cmdEnv, _ []string) error {
	levels, err := levelsOf(ctx, e, true)
	if err != nil {
		return err
	}
	states := make([]BucketState, 0, len(levels))
	for _, lv := range levels {
		b, err := e.st.Buckets.Bucket(ctx, lv.key, lv.limits)
		if err != nil {
			return err
		}
		states = append(states, b)
	}
	local := decidedLocally(e.st.Local, states)
	if e.opts.output == "json" {
		return writeBucketsJSON(e.out, states, local)
	}
	money := make([]map[string]bool, len(levels))
	for i, lv := range levels {
		money[i] = lv.money
	}
	writeBucketsTable(e.out, states, money, local)
	return nil
}

// decidedLocally is, per level, whether the serving replica decides it
// locally now; nil when l is (the process does not know).
func decidedLocally(l Local, states []BucketState) []bool {
	if l == nil {
		return nil
	}
	out := make([]bool, len(states))
	for i, b := range states {
		out[i] = l.DecidedLocally(b.Key)
	}
	return out
}

func runBucketReset(ctx context.Context, e *cmdEnv, _ []string) error {
	levels, err := levelsOf(ctx, e, e.opts.chain)
	if err != nil {
		return err
	}
	if !e.opts.chain {
		levels = levels[:1]
	}
	var done []jsonReset
	for i, lv := range levels {
		before, reset, err := e.st.Buckets.ResetBucket(ctx, lv.key, lv.limits)
		if err != nil {
			return err
		}
		if e.opts.output == "json" {
			done = append(done, jsonReset{Bucket: toJSONBucket(i, before), Reset: reset, Principal: e.opts.principal})
			continue
		}
		name := fmt.Sprintf("bucket %q resource %q", lv.key.Entity, lv.key.Resource)
		if !reset {
			fmt.Fprintf(e.out, "%s: no item, the bucket is full: nothing to reset\n", name)
			continue
		}
		fmt.Fprintf(e.out, "%s: reset to full on %d %s (was %s), by %s\n", name, before.ShardCount, plural(before.ShardCount, "shard"), holdings(before), e.opts.principal)
	}
	if e.opts.output == "json" {
		return writeJSON(e.out, done)
	}
	return nil
}

// jsonReset is one bucket of bucket reset's JSON: as it was, and whether
// it was reset (false: it had no item, it is full).
type jsonReset struct {
	Bucket    jsonBucket `json:"before"`
	Reset     bool       `json:"reset"`
	Principal string     `json:"principal"`
}

// holdings is each limit's tokens of its capacity, in all shards.
func holdings(b BucketState) string {
	var parts []string
	for _, l := range sortedTotal(b) {
		parts = append(parts, fmt.Sprintf("%s %s of %s", l.Name, tokens(l.Tokens), tokens(l.Limit.Capacity)))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

// sortedTotal is b.Total() by limit name.
func sortedTotal(b BucketState) []LimitState {
	tot := b.Total()
	out := make([]LimitState, 0, len(tot))
	for _, l := range tot {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// tokens writes millitokens as tokens, with the thousandths when there
// are any.
func tokens(m tokenbucket.Millitokens) string {
	if m%tokenbucket.PerToken == 0 {
		return fmt.Sprint(int64(m / tokenbucket.PerToken))
	}
	return fmt.Sprintf("%.3f", float64(m)/float64(tokenbucket.PerToken))
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// writeBucketsTable writes one row per level and limit (shard "all"),
// then one per shard when the bucket has several.
//
// A limit in dollars (money[i] names those of level i) is written in
// dollars; a calendar budget's name is followed by its period. With local
// (through a serving replica's admin API), a last column DECIDED says
// where the replica decides each level now: "shared" (the store) or
// "local" (its own buckets, ON_UNAVAILABLE=local).
func writeBucketsTable(w io.Writer, states []BucketState, money []map[string]bool, local []bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "LEVEL\tENTITY\tRESOURCE\tSHARD\tLIMIT\tTOKENS\tCAPACITY\tFULL IN\tCONSUMED"
	if local != nil {
		header += "\tDECIDED"
	}
	fmt.Fprintln(tw, header)
	for i, b := range states {
		head := fmt.Sprintf("%d\t%s\t%s", i, b.Key.Entity, b.Key.Resource)
		tail := ""
		if local != nil {
			tail = "\tshared"
			if local[i] {
				tail = "\tlocal"
			}
		}
		var usd map[string]bool
		if i < len(money) {
			usd = money[i]
		}
		total := sortedTotal(b)
		if len(total) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\tfull (no item)\t-\t-\t-%s\n", head, tail)
			continue
		}
		for _, l := range total {
			fmt.Fprintf(tw, "%s\tall\t%s%s\n", head, limitRow(l, usd[l.Name]), tail)
		}
		if b.ShardCount < 2 {
			continue
		}
		for _, sh := range b.Shards {
			for _, l := range sh.Limits {
				fmt.Fprintf(tw, "%s\t%d\t%s%s\n", head, sh.Shard, limitRow(l, usd[l.Name]), tail)
			}
		}
	}
	_ = tw.Flush()
}

func limitRow(l LimitState, usd bool) string {
	full := "full"
	switch {
	case l.FullIn >= time.Second:
		full = l.FullIn.Round(time.Second).String()
	case l.FullIn > 0:
		full = l.FullIn.Round(time.Millisecond).String()
	}
	amount := tokens
	if usd {
		amount = dollars
	}
	name := l.Name
	if c := l.Limit.Calendar; !c.IsZero() {
		name += " (" + c.String() + ")"
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", name, amount(l.Tokens), amount(l.Limit.Capacity), full, amount(tokenbucket.Millitokens(l.Consumed)))
}

// dollars writes the millitokens of a limit in dollars (a micro-dollar a
// token) as "$12.50".
func dollars(m tokenbucket.Millitokens) string {
	return "$" + descriptors.FormatUSD(int64(m/tokenbucket.PerToken))
}

// jsonLimit is a limit in bucket show's JSON: token counts in tokens
// (thousandths as decimals).
type jsonLimit struct {
	Name     string  `json:"name"`
	Tokens   float64 `json:"tokens"`
	Capacity float64 `json:"capacity"`
	Refill   string  `json:"refill"` // "amount/period"
	FullInMs int64   `json:"full_in_ms"`
	Consumed float64 `json:"consumed"`
	Stored   bool    `json:"stored"`
}

type jsonShard struct {
	Shard  int         `json:"shard"`
	Exists bool        `json:"exists"`
	Limits []jsonLimit `json:"limits"`
}

type jsonBucket struct {
	Level      int         `json:"level"`
	Namespace  string      `json:"namespace"`
	Entity     string      `json:"entity"`
	Resource   string      `json:"resource"`
	ShardCount int         `json:"shard_count"`
	At         time.Time   `json:"at"`
	Limits     []jsonLimit `json:"limits"`
	Shards     []jsonShard `json:"shards"`
	// DecidedLocally says whether the serving replica decides the level
	// on its own buckets now (ON_UNAVAILABLE=local, the store failing
	// it); absent when the process does not know (the command line on
	// DynamoDB, the embedded store).
	DecidedLocally *bool `json:"decided_locally,omitempty"`
}

func toJSONLimit(l LimitState) jsonLimit {
	t := func(m tokenbucket.Millitokens) float64 { return float64(m) / float64(tokenbucket.PerToken) }
	return jsonLimit{
		Name: l.Name, Tokens: t(l.Tokens), Capacity: t(l.Limit.Capacity), FullInMs: l.FullIn.Milliseconds(),
		Refill: tokens(l.Limit.RefillAmount) + "/" + l.Limit.RefillPeriod.String(), Consumed: t(tokenbucket.Millitokens(l.Consumed)), Stored: l.Stored,
	}
}

func writeBucketsJSON(w io.Writer, states []BucketState, local []bool) error {
	out := make([]jsonBucket, 0, len(states))
	for i, b := range states {
		jb := toJSONBucket(i, b)
		if local != nil {
			jb.DecidedLocally = &local[i]
		}
		out = append(out, jb)
	}
	return writeJSON(w, out)
}

// toJSONBucket is b, level i of a chain, in bucket show's JSON.
func toJSONBucket(i int, b BucketState) jsonBucket {
	jb := jsonBucket{Level: i, Namespace: b.Key.Namespace, Entity: b.Key.Entity, Resource: b.Key.Resource, ShardCount: b.ShardCount, At: b.At.UTC(), Limits: []jsonLimit{}}
	for _, l := range sortedTotal(b) {
		jb.Limits = append(jb.Limits, toJSONLimit(l))
	}
	for _, sh := range b.Shards {
		js := jsonShard{Shard: sh.Shard, Exists: sh.Exists, Limits: []jsonLimit{}}
		for _, l := range sh.Limits {
			js.Limits = append(js.Limits, toJSONLimit(l))
		}
		jb.Shards = append(jb.Shards, js)
	}
	return jb
}

// writeJSON writes v indented, as every -o json does.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
