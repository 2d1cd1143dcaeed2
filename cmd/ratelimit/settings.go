package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
)

// legacyIgnored and legacyArgs are what the last loadSettings accepted but
// does not use, for serve to log once its logger exists.
var legacyIgnored, legacyArgs []string

const settingsHint = "Run 'ratelimit settings' for every setting, its default and meaning."

// loadSettings reads the environment, then the flags (serve's, plus those
// extra defines), then validates. It returns flag.ErrHelp for -h, and a
// *usageError for anything wrong with the command line or the settings.
func loadSettings(name string, args []string, getenv func(string) string, extra func(*flag.FlagSet)) (config.Settings, error) {
	s, err := config.FromEnv(getenv)
	if err != nil {
		return s, &usageError{cmd: name, err: err, hint: settingsHint}
	}
	fs := flag.NewFlagSet("ratelimit "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	s.RegisterFlags(fs)
	if extra != nil {
		extra(fs)
	}
	args, dropped := dropForeignFlags(fs, args)
	legacyArgs = dropped
	ignored, err := config.CheckLegacy(getenv)
	if err != nil {
		return s, &usageError{cmd: name, err: err, hint: settingsHint}
	}
	legacyIgnored = ignored
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, &usageError{cmd: name, err: admin.FlagError(err, fs)}
	}
	if fs.NArg() > 0 {
		return s, &usageError{cmd: name, err: fmt.Errorf("unexpected argument %q (%s takes flags only)", fs.Arg(0), name), hint: argumentHint(name, fs.Arg(0))}
	}
	if err := s.Validate(); err != nil {
		return s, &usageError{cmd: name, err: err, hint: settingsHint}
	}
	return s, nil
}

// reportSettingsError answers loadSettings' error: the command's help for
// -h (exit 0), else the usage error (exit 2).
func reportSettingsError(stdout, stderr io.Writer, err error, help func(io.Writer)) int {
	if errors.Is(err, flag.ErrHelp) {
		help(stdout)
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return reportUsage(stderr, ue)
	}
	fmt.Fprintf(stderr, "ratelimit: %v\n", err)
	return exitUsage
}

// printSettings runs `ratelimit settings`.
func printSettings(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("settings", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return reportSettingsError(stdout, stderr, err, printSettingsHelp)
	}
	if fs.NArg() > 0 {
		return reportUsage(stderr, &usageError{cmd: "settings", err: fmt.Errorf("takes no arguments, got %q", fs.Arg(0))})
	}
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
	return exitOK
}

// argumentHint answers an argument given to serve or check-config, which
// take flags only: when it is a directory, or check-config's (whose one
// input is a directory), it points at -config_dir; else it is "" (the
// pointer to the command's help).
func argumentHint(name, arg string) string {
	if name != "check-config" && !isDir(arg) {
		return ""
	}
	return fmt.Sprintf("Name the descriptor directory with -config_dir: ratelimit %s -config_dir %s\nRun 'ratelimit %s -h' for usage.", name, arg, name)
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
