package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Usage is the help text of the admin subcommands.
const Usage = `usage: ratelimit <command> [flags] [args]

commands:
  table create                              create the table (its index, stream, TTL) if missing; for development
  namespace register NAME                   register a namespace (idempotent)
  namespace list                            list registered namespaces
  limits set SCOPE SPEC...                  store limits, merged over those already there
  limits get SCOPE                          show stored limits
  limits delete SCOPE [NAME...]             delete named limits (all when none is named)
  entity create ID [-parent P] [-cascade]   create or replace an entity record
  entity show ID                            show an entity and its children

SCOPE is one of: -system | -resource R | -entity E [-resource R]
SPEC is name:rate[/sec|/min|/hour|/day][:burst], e.g. rpm:100/min or tpm:50000/min:80000

flags (every command):
  -table NAME        DynamoDB table (env DYNAMODB_TABLE)
  -endpoint URL      DynamoDB endpoint, e.g. DynamoDB Local (env DYNAMODB_ENDPOINT)
  -region REGION     AWS region (env AWS_REGION, default us-east-1)
  -namespace NS      namespace (env NAMESPACE, default "default")
`

// ErrUsage is wrapped by every error about the command line itself.
var ErrUsage = errors.New("admin: usage")

// Commands lists the first words Run handles, for the binary's dispatch.
var Commands = []string{"table", "namespace", "limits", "entity"}

type settings struct {
	table, endpoint, region, namespace string
	system, cascade                    bool
	entity, resource, parent           string
}

// Run runs one admin command line (args without the program name), reading
// defaults from env and writing results to stdout and diagnostics to
// stderr.
func Run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, Usage)
		if len(args) >= 1 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return fmt.Errorf("%w: want a command and a verb", ErrUsage)
	}
	group, verb := args[0], args[1]
	var st settings
	fs := flag.NewFlagSet(group+" "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, Usage) }
	fs.StringVar(&st.table, "table", env("DYNAMODB_TABLE"), "DynamoDB table")
	fs.StringVar(&st.endpoint, "endpoint", env("DYNAMODB_ENDPOINT"), "DynamoDB endpoint")
	fs.StringVar(&st.region, "region", or(env("AWS_REGION"), "us-east-1"), "AWS region")
	fs.StringVar(&st.namespace, "namespace", or(env("NAMESPACE"), "default"), "namespace")
	fs.BoolVar(&st.system, "system", false, "system scope")
	fs.StringVar(&st.entity, "entity", "", "entity scope")
	fs.StringVar(&st.resource, "resource", "", "resource scope")
	fs.StringVar(&st.parent, "parent", "", "parent entity")
	fs.BoolVar(&st.cascade, "cascade", false, "debits cascade to the parent")
	rest, err := parseInterleaved(fs, args[2:])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if st.table == "" {
		return fmt.Errorf("%w: no table: set -table or DYNAMODB_TABLE", ErrUsage)
	}
	client, err := dynamo.NewClient(ctx, st.endpoint, st.region)
	if err != nil {
		return err
	}
	if group == "table" {
		if verb != "create" {
			return unknown(group, verb)
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := dynamo.CreateTable(ctx, client, st.table); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "table %s is ready (schema %s)\n", st.table, dynamo.SchemaVersion)
		return nil
	}
	if group == "entity" && len(rest) != 1 {
		return fmt.Errorf("%w: entity %s takes one ID", ErrUsage, verb)
	}
	if group == "limits" {
		if _, err := scopeOf(st); err != nil {
			return err
		}
		if verb == "set" {
			for _, a := range rest {
				if _, _, err := dynamo.ParseLimit(a); err != nil {
					return fmt.Errorf("%w: %w", ErrUsage, err)
				}
			}
		}
	}
	store, err := dynamo.NewStore(ctx, client, dynamo.Config{Table: st.table, Namespace: st.namespace, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer store.Close()
	switch group {
	case "namespace":
		return runNamespace(ctx, store, verb, rest, stdout)
	case "limits":
		return runLimits(ctx, store, st, verb, rest, stdout)
	case "entity":
		return runEntity(ctx, store, st, verb, rest, stdout)
	}
	return unknown(group, verb)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func unknown(group, verb string) error {
	return fmt.Errorf("%w: unknown command %q", ErrUsage, group+" "+verb)
}

func runNamespace(ctx context.Context, s *dynamo.Store, verb string, args []string, out io.Writer) error {
	switch verb {
	case "register":
		if len(args) != 1 {
			return fmt.Errorf("%w: namespace register takes one NAME", ErrUsage)
		}
		ns, err := s.RegisterNamespace(ctx, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "namespace %s id %s\n", ns.Name, ns.ID)
		return nil
	case "list":
		nss, err := s.Namespaces(ctx)
		if err != nil {
			return err
		}
		for _, ns := range nss {
			fmt.Fprintf(out, "%s\t%s\n", ns.Name, ns.ID)
		}
		return nil
	}
	return unknown("namespace", verb)
}

func scopeOf(st settings) (dynamo.Scope, error) {
	sc := dynamo.Scope{Namespace: st.namespace, System: st.system, Entity: st.entity, Resource: st.resource}
	if st.system && (st.entity != "" || st.resource != "") {
		return sc, fmt.Errorf("%w: -system takes no -entity or -resource", ErrUsage)
	}
	if !st.system && st.entity == "" && st.resource == "" {
		return sc, fmt.Errorf("%w: name a scope: -system, -resource R, or -entity E [-resource R]", ErrUsage)
	}
	return sc, nil
}

func runLimits(ctx context.Context, s *dynamo.Store, st settings, verb string, args []string, out io.Writer) error {
	sc, err := scopeOf(st)
	if err != nil {
		return err
	}
	switch verb {
	case "set":
		if len(args) == 0 {
			return fmt.Errorf("%w: limits set needs at least one name:rate[/unit][:burst]", ErrUsage)
		}
		limits := map[string]tokenbucket.Limit{}
		for _, a := range args {
			name, l, err := dynamo.ParseLimit(a)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrUsage, err)
			}
			limits[name] = l
		}
		if err := s.SetLimits(ctx, sc, limits); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: set %s\n", sc, dynamo.FormatLimits(limits))
		return nil
	case "get":
		limits, err := s.Limits(ctx, sc)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %s\n", sc, dynamo.FormatLimits(limits))
		return nil
	case "delete":
		if err := s.DeleteLimits(ctx, sc, args...); err != nil {
			return err
		}
		what := "all limits"
		if len(args) > 0 {
			what = strings.Join(args, " ")
		}
		fmt.Fprintf(out, "%s: deleted %s\n", sc, what)
		return nil
	}
	return unknown("limits", verb)
}

func runEntity(ctx context.Context, s *dynamo.Store, st settings, verb string, args []string, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: entity %s takes one ID", ErrUsage, verb)
	}
	switch verb {
	case "create":
		e := dynamo.Entity{Namespace: st.namespace, ID: args[0], Parent: st.parent, Cascade: st.cascade}
		if err := s.PutEntity(ctx, e); err != nil {
			return err
		}
		fmt.Fprintf(out, "entity %q parent %q cascade %t\n", e.ID, e.Parent, e.Cascade)
		return nil
	case "show":
		e, err := s.Entity(ctx, st.namespace, args[0])
		if err != nil {
			return err
		}
		kids, err := s.Children(ctx, st.namespace, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "entity %q parent %q cascade %t\n", e.ID, e.Parent, e.Cascade)
		for _, k := range kids {
			fmt.Fprintf(out, "child %q\n", k)
		}
		return nil
	}
	return unknown("entity", verb)
}
