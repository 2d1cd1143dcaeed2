package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// group is an admin command's first word and its verbs.
type group struct {
	name, summary string
	job           Job // the store's job its verbs need
	verbs         []*verb
}

// verb is one admin command: its arguments, flags, help and action.
type verb struct {
	name     string
	synopsis string // after "ratelimit GROUP VERB"
	summary  string // one line
	about    string // paragraphs of help
	args     argSpec
	flags    []flagSpec
	check    func(o *opts, args []string) error // usage checks before any call
	examples []string
	noStore  bool // runs on the client alone (table create)
	run      func(ctx context.Context, e *cmdEnv, args []string) error
}

// argSpec names a verb's arguments (for its help) and bounds the count of
// its positional ones, each an of.
type argSpec struct {
	names    [][2]string // name, meaning
	of       string      // what a positional argument is ("ID", "SPEC")
	min, max int         // max < 0: no bound
}

func (a argSpec) check(args []string) error {
	switch {
	case len(args) < a.min:
		return fmt.Errorf("missing %s", a.of)
	case a.max == 0 && len(args) > 0:
		return fmt.Errorf("takes no arguments, got %q", strings.Join(args, " "))
	case a.max > 0 && len(args) > a.max:
		return fmt.Errorf("takes one %s, got %d: %s", a.of, len(args), strings.Join(args, " "))
	}
	return nil
}

// flagSpec is one verb-specific flag.
type flagSpec struct {
	name, arg, help string
	bind            func(fs *flag.FlagSet, o *opts)
}

// opts holds the verb-specific flags of one run.
type opts struct {
	ns                       string
	system, cascade          bool
	entity, resource, parent string
	principal                string // -principal: who the audit records name
	output                   string // -o: table or json (usage: or chart)
	domain, descriptor       string // a bucket named as a request names it
	configDir                string // resolve domain and descriptor through these descriptor files
	chain, yes               bool
	limit, amount, usd       string    // bucket topup
	usage                    usageOpts // usage list and summary
}

// cmdEnv is what a verb runs with.
type cmdEnv struct {
	client *dynamodb.Client // noStore verbs only (table create)
	// st is the store the verb runs on; it keeps the verb's group's job.
	st Stores
	// live, when set, is the serving process's descriptor configuration
	// (the admin API): -domain and -descriptor resolve through it.
	live     func() *descriptors.Config
	settings config.Settings
	opts     opts
	out      io.Writer
	errOut   io.Writer
}

var (
	flagSystem   = flagSpec{"system", "", "the system scope: limits every resource and entity shares", func(fs *flag.FlagSet, o *opts) { fs.BoolVar(&o.system, "system", false, "") }}
	flagEntity   = flagSpec{"entity", "E", "an entity's scope (e.g. generic_key=demo, an API key, a tenant)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.entity, "entity", "", "") }}
	flagResource = flagSpec{"resource", "R", "a resource's scope (e.g. a model or route); with -entity, that entity's limits on it", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.resource, "resource", "", "") }}
	scopeFlags   = []flagSpec{flagSystem, flagEntity, flagResource}
	// flagPrincipal is on every command that writes an audit record.
	flagPrincipal = flagSpec{"principal", "P", "who the audit record names as making the change (default: $USER, else the OS user)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.principal, "principal", "", "") }}
	scopeArg      = [2]string{"SCOPE", "-system | -resource R | -entity E [-resource R]"}
	specArg       = [2]string{"SPEC", "name:rate[/sec|/min|/hour|/day][:burst], e.g. rpm:100/min or tpm:50000/min:80000; the rate is per second when no unit is given, the burst is the rate when not given"}
)

var groups = []*group{
	{name: "table", summary: "DynamoDB: create the table", verbs: []*verb{{
		name: "create", summary: "create the table (index, stream, TTL) if missing; idempotent",
		about: "Creates the DynamoDB table with its index, stream and TTL, on-demand\n" +
			"billing, waits until it is active and writes its schema version. Running\n" +
			"it on a table that exists only checks the schema version. Meant for\n" +
			"development and DynamoDB Local; production tables come from\n" +
			"infrastructure code.",
		examples: []string{"DYNAMODB_ENDPOINT=http://localhost:8000 ratelimit table create", "ratelimit table create -dynamodb_table ratelimit-prod -aws_region eu-west-1"},
		noStore:  true,
		run:      runTableCreate,
	}}},
	{name: "namespace", summary: "DynamoDB, Redis: register, list, delete, recover and purge namespaces", job: JobNamespaces, verbs: append([]*verb{{
		name: "register", synopsis: "NAME", summary: "register a namespace (idempotent) and print its id",
		about: "Records NAME in the store's namespace registry (namespace list) with\n" +
			"an id it generates (12 hex digits), and prints both; registering a name\n" +
			"again prints the same id. The id only names the registration: the\n" +
			"namespace's keys hold its name, so a namespace works whether it is\n" +
			"registered or not.",
		args:     argSpec{names: [][2]string{{"NAME", "the namespace's name"}}, of: "NAME", min: 1, max: 1},
		flags:    []flagSpec{flagPrincipal},
		examples: []string{"ratelimit namespace register team-a"},
		run:      runNamespaceRegister,
	}, {
		name: "list", summary: "list registered namespaces with their ids",
		about: "Prints one line per registered namespace: its name and id, separated\n" +
			"by a tab; a namespace that is not active has a third column: its state\n" +
			"and since when (deleted 2006-01-02T15:04:05Z).",
		examples: []string{"ratelimit namespace list"},
		run:      runNamespaceList,
	}}, lifecycleVerbs...)},
	{name: "limits", summary: "DynamoDB, Redis: set, get and delete stored limits", job: JobEntities, verbs: []*verb{{
		name: "set", synopsis: "SCOPE SPEC...", summary: "store limits at a scope, merged over those already there",
		about: "Stores each SPEC at SCOPE; a limit of the same name already stored is\n" +
			"replaced, the others are kept. Every change writes an audit record.",
		args:     argSpec{names: [][2]string{scopeArg, specArg}, of: "SPEC (name:rate[/unit][:burst])", min: 1, max: -1},
		flags:    append(scopeFlags, flagPrincipal),
		check:    checkSet,
		examples: []string{"ratelimit limits set -entity 'generic_key=demo' -resource example default:5/min", "ratelimit limits set -system rpm:1000/min:1500"},
		run:      runLimitsSet,
	}, {
		name: "get", synopsis: "SCOPE", summary: "show the limits stored at a scope",
		about:    "Prints the limits stored at SCOPE, or fails when none are.",
		args:     argSpec{names: [][2]string{scopeArg}},
		flags:    scopeFlags,
		check:    checkScopeOnly,
		examples: []string{"ratelimit limits get -entity 'generic_key=demo' -resource example", "ratelimit limits get -system"},
		run:      runLimitsGet,
	}, {
		name: "delete", synopsis: "SCOPE [NAME...]", summary: "delete named limits at a scope (all when none is named)",
		about: "Deletes the limits NAME... stored at SCOPE, or all of them when no NAME\n" +
			"is given. Deleting what is not stored is not an error (as aws dynamodb\n" +
			"delete-item): the command says nothing was there and exits 0. Every\n" +
			"change writes an audit record.",
		args:     argSpec{names: [][2]string{scopeArg, {"NAME", "a limit's name, as in its SPEC (rpm in rpm:100/min)"}}, of: "NAME", max: -1},
		flags:    append(scopeFlags, flagPrincipal),
		check:    checkScopeOnly,
		examples: []string{"ratelimit limits delete -resource example", "ratelimit limits delete -entity 'generic_key=demo' -resource example default"},
		run:      runLimitsDelete,
	}}},
	{name: "entity", summary: "DynamoDB, Redis: create and show entities", job: JobEntities, verbs: []*verb{{
		name: "create", synopsis: "ID", summary: "create or replace an entity record",
		about: "Creates the entity ID, or replaces its record. With -parent, ID is a\n" +
			"child of that entity; with -cascade, every debit of ID's children is\n" +
			"also charged to ID's own limits. ID and P are entity values as requests\n" +
			"name them, escaped ('/', '#', '=', '&', '%', '~', control bytes and\n" +
			"invalid UTF-8 as %XX: org%2Fteam for org/team). A parent that would\n" +
			"make a cycle, or a chain of more than 8 entities, is refused. Every\n" +
			"replica sees a change within CONFIG_CACHE_TTL.",
		args: argSpec{names: [][2]string{{"ID", "the entity's id (a tenant, an API key, …)"}}, of: "ID", min: 1, max: 1},
		flags: []flagSpec{
			{"parent", "P", "the parent entity's id", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.parent, "parent", "", "") }},
			{"cascade", "", "debits of this entity's children cascade to it", func(fs *flag.FlagSet, o *opts) { fs.BoolVar(&o.cascade, "cascade", false, "") }},
			flagPrincipal,
		},
		examples: []string{"ratelimit entity create acme -cascade", "ratelimit entity create key-1 -parent acme"},
		run:      runEntityCreate,
	}, {
		name: "show", synopsis: "ID [-resource R]", summary: "show an entity, its children and the chain above it",
		about: "Prints the entity's record, then one line per child, then the chain of\n" +
			"entities from ID up its parents (chain \"ID\" -> \"parent\" -> …), then one\n" +
			"line per entity of that chain: its cascade flag and the limits stored for\n" +
			"it and R, or else its default limits (without -resource, its default\n" +
			"limits). With -resource, each level with stored limits is followed by\n" +
			"its bucket for R: each limit's tokens left and the time until it is full.\n" +
			"A debit of ID is also charged to each parent up the chain while the\n" +
			"parents cascade.",
		args: argSpec{names: [][2]string{{"ID", "the entity's id"}}, of: "ID", min: 1, max: 1},
		flags: []flagSpec{
			{"resource", "R", "the resource whose limits to show at each level (default: each entity's default limits)", func(fs *flag.FlagSet, o *opts) { fs.StringVar(&o.resource, "resource", "", "") }},
		},
		examples: []string{"ratelimit entity show acme", "ratelimit entity show key-1 -resource example"},
		run:      runEntityShow,
	}}},
	bucketGroup,
	auditGroup,
	usageGroup,
}

func findGroup(name string) *group {
	for _, g := range groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

func groupNames() []string {
	var out []string
	for _, g := range groups {
		out = append(out, g.name)
	}
	return out
}

func (g *group) find(name string) *verb {
	for _, v := range g.verbs {
		if v.name == name {
			return v
		}
	}
	return nil
}

func (g *group) verbNames() []string {
	var out []string
	for _, v := range g.verbs {
		out = append(out, v.name)
	}
	return out
}

func checkScopeOnly(o *opts, _ []string) error {
	_, err := scopeOf(o)
	return err
}

func checkSet(o *opts, args []string) error {
	if _, err := scopeOf(o); err != nil {
		return err
	}
	for _, a := range args {
		if _, _, err := dadmin.ParseLimit(a); err != nil {
			return err
		}
	}
	return nil
}

func scopeOf(o *opts) (Scope, error) {
	sc := Scope{Namespace: o.ns, System: o.system, Entity: o.entity, Resource: o.resource}
	if o.system && (o.entity != "" || o.resource != "") {
		return sc, errors.New("-system takes no -entity or -resource")
	}
	if !o.system && o.entity == "" && o.resource == "" {
		return sc, errors.New("missing SCOPE: name one of -system, -resource R, or -entity E [-resource R]")
	}
	return sc, nil
}

func runTableCreate(ctx context.Context, e *cmdEnv, _ []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := dadmin.CreateTable(ctx, e.client, e.settings.DynamoDBTable); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "table %s is ready (schema %s)\n", e.settings.DynamoDBTable, dynamo.SchemaVersion)
	return nil
}

func runNamespaceRegister(ctx context.Context, e *cmdEnv, args []string) error {
	ns, err := e.st.Namespaces.RegisterNamespace(ctx, args[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "namespace %s id %s\n", ns.Name, ns.ID)
	return nil
}

func runNamespaceList(ctx context.Context, e *cmdEnv, _ []string) error {
	nss, err := e.st.Namespaces.Namespaces(ctx)
	if err != nil {
		return err
	}
	if len(nss) == 0 {
		fmt.Fprintln(e.errOut, "no namespaces registered (ratelimit namespace register NAME)")
	}
	for _, ns := range nss {
		if ns.State == NamespaceActive {
			fmt.Fprintf(e.out, "%s\t%s\n", ns.Name, ns.ID)
			continue
		}
		fmt.Fprintf(e.out, "%s\t%s\t%s %s\n", ns.Name, ns.ID, ns.State, ns.Changed.UTC().Format(time.RFC3339))
	}
	return nil
}

func runLimitsSet(ctx context.Context, e *cmdEnv, args []string) error {
	sc, _ := scopeOf(&e.opts)
	limits := map[string]tokenbucket.Limit{}
	for _, a := range args {
		name, l, _ := dadmin.ParseLimit(a) // checked by checkSet
		limits[name] = l
	}
	if err := e.st.Entities.SetLimits(ctx, sc, limits); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "%s: set %s\n", sc, dadmin.FormatLimits(limits))
	return nil
}

func runLimitsGet(ctx context.Context, e *cmdEnv, _ []string) error {
	sc, _ := scopeOf(&e.opts)
	limits, err := e.st.Entities.Limits(ctx, sc)
	if errors.Is(err, ErrNotFound) {
		return &explained{fmt.Sprintf("%s: no limits stored in namespace %s", sc, e.opts.ns), err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "%s: %s\n", sc, dadmin.FormatLimits(limits))
	return nil
}

// runLimitsDelete deletes what is stored of the named limits and reports
// what was not there; deleting nothing is not an error.
func runLimitsDelete(ctx context.Context, e *cmdEnv, names []string) error {
	sc, _ := scopeOf(&e.opts)
	before, err := e.st.Entities.Limits(ctx, sc)
	if errors.Is(err, ErrNotFound) {
		fmt.Fprintf(e.out, "%s: no limits stored, nothing to delete\n", sc)
		return nil
	}
	if err != nil {
		return err
	}
	var present, absent []string
	for _, n := range names {
		if _, ok := before[n]; ok {
			if !slices.Contains(present, n) {
				present = append(present, n)
			}
		} else {
			absent = append(absent, n)
		}
	}
	if len(names) > 0 && len(present) == 0 {
		fmt.Fprintf(e.out, "%s: no limit named %s stored, nothing to delete\n", sc, strings.Join(absent, " "))
		return nil
	}
	if err := e.st.Entities.DeleteLimits(ctx, sc, present...); err != nil {
		return err
	}
	what := "all limits (" + dadmin.FormatLimits(before) + ")"
	if len(names) > 0 {
		what = strings.Join(present, " ")
	}
	fmt.Fprintf(e.out, "%s: deleted %s\n", sc, what)
	if len(absent) > 0 {
		fmt.Fprintf(e.out, "%s: no limit named %s was stored\n", sc, strings.Join(absent, " "))
	}
	return nil
}

func runEntityCreate(ctx context.Context, e *cmdEnv, args []string) error {
	ent := Entity{Namespace: e.opts.ns, ID: args[0], Parent: e.opts.parent, Cascade: e.opts.cascade}
	if err := e.st.Entities.PutEntity(ctx, ent); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "entity %q parent %q cascade %t\n", ent.ID, ent.Parent, ent.Cascade)
	return nil
}

func runEntityShow(ctx context.Context, e *cmdEnv, args []string) error {
	ent, err := e.st.Entities.Entity(ctx, e.opts.ns, args[0])
	if errors.Is(err, ErrNotFound) {
		return &explained{fmt.Sprintf("entity %q does not exist in namespace %s", args[0], e.opts.ns), err}
	}
	if err != nil {
		return err
	}
	kids, err := e.st.Entities.Children(ctx, e.opts.ns, args[0])
	if err != nil {
		return err
	}
	levels, cycle, err := e.st.Entities.Chain(ctx, e.opts.ns, args[0], e.opts.resource)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "entity %q parent %q cascade %t\n", ent.ID, ent.Parent, ent.Cascade)
	for _, k := range kids {
		fmt.Fprintf(e.out, "child %q\n", k)
	}
	fmt.Fprintln(e.out, chainLine(levels, cycle))
	for _, l := range levels {
		fmt.Fprintln(e.out, levelLine(l))
		if e.opts.resource == "" || len(l.Limits) == 0 {
			continue
		}
		if e.st.Buckets == nil {
			continue // a store of entities without buckets
		}
		// The level's bucket for the resource: what each stored limit
		// holds now.
		key := cascade.Key{Namespace: e.opts.ns, Entity: l.Entity.ID, Resource: e.opts.resource}
		b, err := e.st.Buckets.Bucket(ctx, key, l.Limits)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.out, bucketLine(l, e.opts.resource, b))
	}
	return nil
}

// bucketLine is entity show's line for a level's bucket for a resource:
// each stored limit's whole tokens left of its capacity, and how long
// until it is full again, by limit name.
func bucketLine(l ChainLevel, resource string, b BucketState) string {
	total := b.Total()
	names := make([]string, 0, len(l.Limits))
	for n := range l.Limits {
		names = append(names, n)
	}
	sort.Strings(names)
	var s strings.Builder
	fmt.Fprintf(&s, "bucket %q resource %q:", l.Entity.ID, resource)
	for i, n := range names {
		if i > 0 {
			s.WriteByte(',')
		}
		st := total[n]
		fmt.Fprintf(&s, " %s %d of %d left", n, max(st.Tokens, 0)/tokenbucket.PerToken, l.Limits[n].Capacity/tokenbucket.PerToken)
		if st.FullIn > 0 {
			fmt.Fprintf(&s, " (full in %v)", st.FullIn.Round(time.Second))
		}
	}
	return s.String()
}

// chainLine is entity show's "chain" line: the entity and its parents,
// nearest first, and why the chain stops when not at an entity without a
// parent or a parent without a record.
func chainLine(levels []ChainLevel, cycle bool) string {
	var b strings.Builder
	b.WriteString("chain")
	for i, l := range levels {
		if i > 0 {
			b.WriteString(" ->")
		}
		fmt.Fprintf(&b, " %q", l.Entity.ID)
	}
	last := levels[len(levels)-1]
	switch {
	case cycle:
		fmt.Fprintf(&b, " -> %q (a cycle: stops here)", last.Entity.Parent)
	case last.Stored && last.Entity.Parent != "":
		fmt.Fprintf(&b, " -> %q (more than %d entities: stops here)", last.Entity.Parent, descriptors.MaxChain)
	}
	return b.String()
}

// levelLine is entity show's line for one level of the chain: its cascade
// flag and the limits stored for it and the resource asked about (else
// its default).
func levelLine(l ChainLevel) string {
	if !l.Stored {
		return fmt.Sprintf("level %q: no entity record", l.Entity.ID)
	}
	head := fmt.Sprintf("level %q cascade %t", l.Entity.ID, l.Entity.Cascade)
	switch {
	case l.Limits == nil:
		return head + ": no limits stored"
	case l.Scope.Resource != "":
		return fmt.Sprintf("%s resource %q: %s", head, l.Scope.Resource, dadmin.FormatLimits(l.Limits))
	default:
		return head + " default: " + dadmin.FormatLimits(l.Limits)
	}
}
