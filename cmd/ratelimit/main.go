package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/pkg/descriptors/suggest"
)

func main() {
	os.Exit(Main(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// Exit codes of Main.
const (
	exitOK      = 0 // success, and help asked for
	exitFailure = 1 // the command ran and failed (or check-config found problems)
	exitUsage   = 2 // bad usage: unknown command or flag, wrong arguments, a setting that does not parse
)

// command is one of the binary's first words.
type command struct {
	name, summary string
}

// commands lists the binary's commands in the order the command list shows
// them; the admin commands' summaries come from internal/admin.
func commands() []command {
	cs := []command{
		{"serve", "serve the rate-limit service (the default when no command is given)"},
		{"check-config", "load a descriptor directory and report every problem"},
		{"settings", "list every setting, its default and meaning"},
		{"aggregator", "DynamoDB: read the table's stream into usage snapshots"},
	}
	for _, g := range admin.Groups() {
		cs = append(cs, command{g[0], g[1]})
	}
	return append(cs, command{"help", "show the help of a command"})
}

func commandNames() []string {
	var out []string
	for _, c := range commands() {
		out = append(out, c.name)
	}
	return out
}

// printCommands writes the command list: `ratelimit -h`, `ratelimit help`.
func printCommands(w io.Writer) {
	fmt.Fprint(w, `ratelimit is an Envoy rate-limit service (envoy.service.ratelimit.v3) and its tools.

Usage:
  ratelimit [COMMAND] [ARGS] [flags]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprint(w, `
With no command, or when the first argument is a flag, ratelimit serves:
'ratelimit -grpc_port 9000' is 'ratelimit serve -grpc_port 9000'.

Settings come from the environment; a flag named as the variable in lower
case overrides it (GRPC_PORT → -grpc_port). 'ratelimit settings' lists them.
The DynamoDB commands read the same settings as serve (DYNAMODB_TABLE,
DYNAMODB_ENDPOINT, AWS_REGION, NAMESPACE) with the same defaults.

Exit status: 0 success, 1 failure, 2 bad usage.

Run 'ratelimit help COMMAND' or 'ratelimit COMMAND -h' for a command's help.
`)
}

// usageError is an error about the command line of cmd ("serve",
// "limits set"; "" for the binary itself). Main prints it on one line with
// a pointer to the help, and exits 2.
type usageError struct {
	cmd  string
	err  error
	hint string // replaces the pointer to cmd's help when set
}

func (e *usageError) Error() string { return e.err.Error() }

// reportUsage prints a usage error and returns exitUsage.
func reportUsage(stderr io.Writer, e *usageError) int {
	prefix := "ratelimit"
	if e.cmd != "" {
		prefix += " " + e.cmd
	}
	fmt.Fprintf(stderr, "%s: %v\n", prefix, e.err)
	switch {
	case e.hint != "":
		fmt.Fprintln(stderr, e.hint)
	case e.cmd == "":
		fmt.Fprintln(stderr, "Run 'ratelimit -h' for the commands.")
	default:
		fmt.Fprintf(stderr, "Run 'ratelimit %s -h' for usage.\n", e.cmd)
	}
	return exitUsage
}

// Main runs the binary with the given arguments and environment and returns
// its exit code: 0 on success (help included), 1 on failure, 2 on bad
// usage. With no arguments, or a flag first (envoyproxy/ratelimit's image
// runs /bin/ratelimit bare; Envoy Gateway adds --name=value flags), it
// serves; -h, -help or --help alone print the command list.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !(len(args) == 1 && isHelp(args[0]))) {
		return runServe(ctx, args, getenv, stdout, stderr)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help":
		printCommands(stdout)
		return exitOK
	case "help":
		return help(ctx, rest, getenv, stdout, stderr)
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "check-config":
		return checkConfig(rest, getenv, stdout, stderr)
	case "settings":
		return printSettings(rest, stdout, stderr)
	case "aggregator":
		return runAggregator(ctx, rest, getenv, stdout, stderr)
	}
	for _, g := range admin.Groups() {
		if cmd == g[0] {
			return adminCommand(ctx, args, getenv, stdout, stderr)
		}
	}
	msg := fmt.Errorf("unknown command %q", cmd)
	if c := suggest.Closest(cmd, commandNames()); c != "" {
		msg = fmt.Errorf("unknown command %q; did you mean %q?", cmd, c)
	}
	return reportUsage(stderr, &usageError{err: msg})
}

// help runs `ratelimit help [COMMAND [VERB]]`.
func help(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printCommands(stdout)
		return exitOK
	}
	if args[0] == "help" || isHelp(args[0]) {
		fmt.Fprintln(stdout, "Usage: ratelimit help [COMMAND [SUBCOMMAND]]\n\nPrints the command list, or a command's help.\n\nExamples:\n  ratelimit help\n  ratelimit help limits set")
		return exitOK
	}
	return Main(ctx, append(args, "-h"), getenv, stdout, stderr)
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// runServe parses serve's settings, answers -h, and serves.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	s, err := loadSettings("serve", args, getenv, nil)
	if err != nil {
		return reportSettingsError(stdout, stderr, err, printServeHelp)
	}
	if err := checkConfigDir(s); err != nil {
		fmt.Fprintf(stderr, "ratelimit serve: %v\n", err)
		return exitFailure
	}
	return serve(ctx, s, stderr)
}

// adminCommand runs a DynamoDB administration command.
func adminCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := admin.Run(ctx, args, getenv, stdout, stderr)
	var ue *admin.UsageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return reportUsage(stderr, &usageError{cmd: ue.Command, err: ue.Err})
	}
	fmt.Fprintf(stderr, "ratelimit %s: %s\n", strings.Join(args[:min(2, len(args))], " "), plainError(err))
	return exitFailure
}

// packagePrefixes are the prefixes the store packages put on their errors
// ("dynamo: "): the command's own name says where the error comes from.
var packagePrefixes = []string{"dynamo: ", "admin: ", "redisstore: ", "memstore: ", "usage: ", "aggregator: "}

// plainError is err's text without the package prefixes that open it or
// one of its parts ("...: dynamo: the bucket ...").
func plainError(err error) string {
	parts := strings.Split(err.Error(), ": ")
	out := parts[:0]
	for i, p := range parts {
		if i < len(parts)-1 && slices.Contains(packagePrefixes, p+": ") {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}
