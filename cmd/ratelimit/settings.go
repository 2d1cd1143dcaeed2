package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dynalimit/dynalimit/internal/config"
)

// legacyIgnored and legacyArgs are what the last loadSettings accepted but
// does not use, for serve to log once its logger exists.
var legacyIgnored, legacyArgs []string

// loadSettings reads the environment, then the flags, then validates.
func loadSettings(name string, args []string, getenv func(string) string, stderr io.Writer) (config.Settings, int, error) {
	s, err := config.FromEnv(getenv)
	if err != nil {
		return s, 2, err
	}
	fs := flag.NewFlagSet("ratelimit "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	s.RegisterFlags(fs)
	args, dropped := dropForeignFlags(fs, args)
	legacyArgs = dropped
	ignored, err := config.CheckLegacy(getenv)
	if err != nil {
		return s, 2, err
	}
	legacyIgnored = ignored
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, 0, err
		}
		return s, 2, err
	}
	if fs.NArg() > 0 {
		return s, 2, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := s.Validate(); err != nil {
		return s, 2, err
	}
	return s, 0, nil
}

func printSettings(stdout io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tMEANING")
	for _, v := range config.Table() {
		def := v.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Name, def, v.Help)
	}
	_ = tw.Flush()
	return 0
}
