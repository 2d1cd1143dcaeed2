package admin

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/dynalimit/dynalimit/internal/config"
)

// help writes the group's help: its commands, the shared flags, examples.
func (g *group) help(w io.Writer) {
	fmt.Fprintf(w, "Usage: ratelimit %s COMMAND [ARGS] [flags]\n\n%s.\n\nCommands:\n", g.name, capitalize(g.summary))
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	for _, v := range g.verbs {
		fmt.Fprintf(tw, "  %s %s\t%s\n", v.name, v.synopsis, v.summary)
	}
	_ = tw.Flush()
	connectionHelp(w)
	fmt.Fprintln(w, "\nExamples:")
	for _, v := range g.verbs {
		fmt.Fprintf(w, "  %s\n", v.examples[0])
	}
	fmt.Fprintf(w, "\nRun 'ratelimit %s COMMAND -h' for a command's arguments and flags.\n", g.name)
}

// help writes the verb's help: usage, what it does, arguments, flags,
// examples.
func (v *verb) help(w io.Writer, g *group) {
	usage := strings.TrimSpace(fmt.Sprintf("ratelimit %s %s %s", g.name, v.name, v.synopsis))
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", usage, v.about)
	if len(v.args.names) > 0 {
		fmt.Fprintln(w, "\nArguments:")
		tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
		for _, a := range v.args.names {
			fmt.Fprintf(tw, "  %s\t%s\n", a[0], a[1])
		}
		_ = tw.Flush()
	}
	if len(v.flags) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
		for _, f := range v.flags {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace("-"+f.name+" "+f.arg), f.help)
		}
		_ = tw.Flush()
	}
	connectionHelp(w)
	if _, ok := apiVerbs[g.name+" "+v.name]; ok {
		fmt.Fprintln(w, "\nThrough a running service instead (the way to the embedded and Redis stores):")
		fmt.Fprintln(w, "  -admin_url URL   run the command through the admin API of the service at URL,\n                   its debug listener with ADMIN_API=true (http://127.0.0.1:6070)")
	}
	fmt.Fprintln(w, "\nExamples:")
	for _, e := range v.examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

// connectionHelp lists the settings every admin command reads, with their
// variables and defaults as config documents them.
func connectionHelp(w io.Writer) {
	defaults := map[string]string{}
	for _, v := range config.Table() {
		defaults[v.Name] = v.Default
	}
	fmt.Fprintln(w, "\nDynamoDB flags (every DynamoDB command reads the same settings as serve,\nfrom the environment first, with the same defaults):")
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	for _, c := range connection {
		name := "-" + c.name
		if c.alias != "" {
			name += ", -" + c.alias
		}
		env := strings.ToUpper(c.name)
		def := defaults[env]
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  %s	%s=%s	%s\n", name, env, def, c.help)
	}
	_ = tw.Flush()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
