package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/descriptors/suggest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// ErrUsage is wrapped by every error about the command line itself: an
// unknown command or flag, a missing or extra argument, a setting that does
// not parse. The binary exits 2 on it.
var ErrUsage = errors.New("admin: usage")

// UsageError is an error about the command line of Command ("limits set",
// "entity"): the binary prints it on one line followed by a pointer to
// Command's help.
type UsageError struct {
	Command string
	Err     error
}

func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns ErrUsage and the cause, so that errors.Is(err, ErrUsage)
// holds.
func (e *UsageError) Unwrap() []error { return []error{ErrUsage, e.Err} }

func usagef(command, format string, args ...any) error {
	return &UsageError{Command: command, Err: fmt.Errorf(format, args...)}
}

// Groups lists the admin commands' first words and their one-line
// summaries, in the order the binary's command list shows them.
func Groups() [][2]string {
	out := make([][2]string, len(groups))
	for i, g := range groups {
		out[i] = [2]string{g.name, g.summary}
	}
	return out
}

// Run runs one admin command line: args[0] is the command (table,
// namespace, limits, entity), args[1] its verb, the rest arguments and
// flags in any order. Settings are read as serve reads them (config.FromEnv
// over getenv, then flags of the same names). Help (-h, or a group's help)
// goes to stdout and returns nil; results go to stdout; an error about the
// command line is a *UsageError.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseCommand(args, getenv, stdout)
	if c == nil || err != nil {
		return err
	}
	if c.adminURL == "" && c.g.job == JobBuckets && c.embeddedService(getenv) {
		// The embedded store's buckets live in the service's process: ask
		// the local service's admin API.
		c.adminURL, c.localAPI = LocalAdminURL(c.settings), true
	}
	if c.adminURL != "" {
		return c.remote(ctx, stdout, stderr)
	}
	for _, k := range []struct{ name, v string }{{"DYNAMODB_TABLE", c.settings.DynamoDBTable}, {"AWS_REGION", c.settings.AWSRegion}, {"NAMESPACE", c.settings.Namespace}} {
		if k.v == "" {
			return usagef(c.name, "%s is empty: set it or its flag (-%s)", k.name, strings.ToLower(k.name))
		}
	}
	return c.onDynamo(ctx, stdout, stderr)
}

// embeddedService reports whether the command's store is the embedded
// one of a service running here: BACKEND_TYPE=memory (the default) and
// no DynamoDB table or endpoint named, in the environment or by a flag.
func (c *command) embeddedService(getenv func(string) string) bool {
	if c.settings.BackendType != config.BackendMemory || getenv("DYNAMODB_TABLE") != "" || getenv("DYNAMODB_ENDPOINT") != "" {
		return false
	}
	named := false
	c.fs.Visit(func(f *flag.Flag) {
		named = named || isConnection(f.Name) && f.Name != "namespace" && f.Name != "backend_timeout"
	})
	return !named
}

// command is one admin command line, parsed and checked.
type command struct {
	g        *group
	v        *verb
	name     string // "bucket show"
	settings config.Settings
	opts     opts
	rest     []string // the positional arguments
	adminURL string   // -admin_url: run it through a service's admin API
	localAPI bool     // adminURL is the local service's, by default (BACKEND_TYPE=memory)
	fs       *flag.FlagSet
}

// parseCommand parses and checks one admin command line as Run describes.
// It returns nil and no error when it wrote help to stdout.
func parseCommand(args []string, getenv func(string) string, stdout io.Writer) (*command, error) {
	if len(args) == 0 {
		return nil, usagef("", "no command: want one of %s", strings.Join(groupNames(), ", "))
	}
	g := findGroup(args[0])
	if g == nil {
		return nil, usagef("", "unknown command %q%s", args[0], didYouMean(args[0], groupNames()))
	}
	if len(args) == 1 {
		return nil, usagef(g.name, "missing command (%s)", strings.Join(g.verbNames(), " or "))
	}
	if isHelp(args[1]) {
		g.help(stdout)
		return nil, nil
	}
	v := g.find(args[1])
	if v == nil {
		return nil, usagef(g.name, "unknown command %q%s", g.name+" "+args[1], didYouMean(args[1], g.verbNames()))
	}
	c := &command{g: g, v: v, name: g.name + " " + v.name}
	s, err := config.FromEnv(getenv)
	if err != nil {
		return nil, &UsageError{Command: c.name, Err: err}
	}
	c.settings = s
	c.fs = c.flagSet(func(fs *flag.FlagSet) {
		bindConnection(fs, &c.settings)
		if _, ok := apiVerbs[c.name]; ok {
			fs.StringVar(&c.adminURL, "admin_url", "", "")
		}
	})
	rest, err := parseInterleaved(c.fs, args[2:])
	if errors.Is(err, flag.ErrHelp) {
		v.help(stdout, g)
		return nil, nil
	}
	if err != nil {
		return nil, &UsageError{Command: c.name, Err: FlagError(err, c.fs)}
	}
	if err := c.check(rest); err != nil {
		return nil, err
	}
	c.opts.ns = c.settings.Namespace
	if c.opts.principal == "" {
		c.opts.principal = defaultPrincipal(getenv)
	}
	return c, nil
}

// flagSet is the verb's flags, writing into c.opts, plus those more
// defines.
func (c *command) flagSet(more func(fs *flag.FlagSet)) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	more(fs)
	for _, f := range c.v.flags {
		f.bind(fs, &c.opts)
	}
	return fs
}

// check runs the verb's checks on the parsed flags and the positional
// arguments rest: the flags first (the scope, which comes first on the
// command line), then the arguments, so that `limits set` alone names the
// missing scope.
func (c *command) check(rest []string) error {
	if c.v.check != nil {
		if err := c.v.check(&c.opts, rest); err != nil {
			return &UsageError{Command: c.name, Err: err}
		}
	}
	if err := c.v.args.check(rest); err != nil {
		return &UsageError{Command: c.name, Err: err}
	}
	c.rest = rest
	return nil
}

// onDynamo runs the command on the DynamoDB table the settings name,
// opened once for it, its audit records naming c.opts.principal.
func (c *command) onDynamo(ctx context.Context, stdout, stderr io.Writer) error {
	s := c.settings
	client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion)
	if err != nil {
		return err
	}
	if c.v.noStore {
		env := &cmdEnv{client: client, settings: s, opts: c.opts, out: stdout, errOut: stderr}
		return Explain(c.v.run(ctx, env, c.rest), s)
	}
	st, err := dynamo.NewStore(ctx, client, dynamo.Config{Table: s.DynamoDBTable, Namespace: s.Namespace, Timeout: max(s.BackendTimeout, MinCallTimeout)}, dynamo.WithPrincipal(c.opts.principal))
	if err != nil {
		return Explain(err, s)
	}
	defer st.Close()
	d := NewDynamo(func(context.Context) (*dynamo.Store, error) { return st, nil }, c.opts.principal, nil)
	return Explain(c.runOn(ctx, d.Stores(), nil, stdout, stderr), s)
}

// runOn runs the command on st, its writes audited under c.opts.principal;
// a verb whose job st does not keep answers the one error unsupported
// builds. live, when set, is the serving process's configuration (the
// admin API).
func (c *command) runOn(ctx context.Context, st Stores, live func() *descriptors.Config, stdout, stderr io.Writer) error {
	if c.v.noStore {
		return &explained{c.name + ": runs only on DynamoDB's client, as a command of its own", ErrUnsupported}
	}
	if !st.Has(c.g.job) {
		return unsupported(c.name, st, c.g.job)
	}
	env := &cmdEnv{st: st, settings: c.settings, opts: c.opts, out: stdout, errOut: stderr, live: live}
	return c.v.run(WithPrincipal(ctx, c.opts.principal), env, c.rest)
}

// RunOn runs one admin command line as Run does, on st instead of the
// table the settings name: a store's own operator scenarios
// (internal/admintest) run through it. A verb whose job st does not keep
// returns an error wrapping ErrUnsupported; so does table create.
func RunOn(ctx context.Context, st Stores, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseCommand(args, getenv, stdout)
	if c == nil || err != nil {
		return err
	}
	if c.adminURL != "" {
		return usagef(c.name, "-admin_url does not go with a store given to RunOn")
	}
	return c.runOn(ctx, st, nil, stdout, stderr)
}

// MinCallTimeout is the least deadline of an admin command's calls
// (BACKEND_TIMEOUT is a decision's budget, often a few milliseconds): the
// store's admin calls have it already, and the walk up an entity's
// ancestors (bucket show -chain) gets it from the store a command runs
// on (Dynamo's open: the service gives its stores of principals this
// deadline).
const MinCallTimeout = 5 * time.Second

// defaultPrincipal is who the audit records name when -principal is not
// given: $USER, else the OS user running the command, else "unknown".
// (On DynamoDB the caller's AWS identity would need an STS call; the
// binary makes none.)
func defaultPrincipal(getenv func(string) string) string {
	if u := getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

// Explain rewrites an error from pkg/dynamo into what a user of the binary
// should do about it: a missing table names the table, the region, the
// endpoint and the command that creates it; missing credentials name the
// settings that provide them. Other errors are returned as they are.
func Explain(err error, s config.Settings) error {
	at := "AWS's endpoint"
	if s.DynamoDBEndpoint != "" {
		at = s.DynamoDBEndpoint
	}
	//nolint:errorlint // Cause returns the sentinel itself, the most specific one err wraps
	switch dynamo.Cause(err) {
	case dynamo.ErrNoCredentials:
		return &explained{fmt.Sprintf("no AWS credentials to call DynamoDB in %s at %s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a role; or DYNAMODB_ENDPOINT for DynamoDB Local",
			s.AWSRegion, at), err}
	case dynamo.ErrNoTable:
		return &explained{fmt.Sprintf("table %s does not exist in %s at %s: create it with 'ratelimit table create', or check DYNAMODB_TABLE",
			s.DynamoDBTable, s.AWSRegion, at), err}
	}
	return err
}

// explained is an error whose text says what to do, wrapping the error it
// explains (errors.Is still finds its sentinels).
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// connection lists the settings every admin command reads, with the
// aliases the README used before the admin flags took serve's names.
var connection = []struct{ name, alias, help string }{
	{"dynamodb_table", "table", "the table"},
	{"dynamodb_endpoint", "endpoint", "endpoint URL, e.g. DynamoDB Local's; empty means AWS"},
	{"aws_region", "region", "the table's region"},
	{"namespace", "", "the namespace entities, limits and buckets are kept in"},
	{"backend_timeout", "", "deadline of each call (at least 5s here)"},
}

// bindConnection defines serve's flags for the connection settings on fs,
// writing into s, plus their aliases.
func bindConnection(fs *flag.FlagSet, s *config.Settings) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	s.RegisterFlags(all)
	for _, c := range connection {
		f := all.Lookup(c.name)
		fs.Var(f.Value, c.name, f.Usage)
		if c.alias != "" {
			fs.Var(f.Value, c.alias, "alias of -"+c.name)
		}
	}
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

// FlagError rewrites the flag package's "flag provided but not defined"
// error of fs as "unknown flag -x", with the closest flag fs defines as a
// suggestion; other errors are returned as they are.
func FlagError(err error, fs *flag.FlagSet) error {
	const undefined = "flag provided but not defined: -"
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, undefined)
	if !ok {
		return err
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if c := suggest.Closest(name, names); c != "" {
		return fmt.Errorf("unknown flag -%s; did you mean -%s?", name, c)
	}
	return fmt.Errorf("unknown flag -%s", name)
}

func isHelp(a string) bool {
	switch a {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func didYouMean(word string, candidates []string) string {
	if c := suggest.Closest(word, candidates); c != "" {
		return fmt.Sprintf("; did you mean %q?", c)
	}
	return ""
}
