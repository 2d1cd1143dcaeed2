package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// checkConfig loads a descriptor directory the way serve does and reports
// every problem: exit 0 when it loads (warnings printed), 1 when it does not
// or, with -strict, when there is a warning. With CONFIG_TYPE=GRPC_XDS_SOTW
// the directory holds adjustments for the pushed rules only
// (checkAdjustments).
func checkConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var strict bool
	s, err := loadSettings("check-config", args, getenv, func(fs *flag.FlagSet) {
		fs.BoolVar(&strict, "strict", false, "fail on any warning")
	})
	if err != nil {
		return reportSettingsError(stdout, stderr, err, printCheckConfigHelp)
	}
	if err := checkConfigDir(s); err != nil {
		fmt.Fprintf(stderr, "ratelimit check-config: %v\n", err)
		return exitFailure
	}
	dir := s.ConfigDir()
	if s.ConfigType == config.ConfigTypeXDS {
		return checkAdjustments(s, dir, stdout, stderr)
	}
	cfg, err := s.Loader()(dir)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit check-config: %s does not load:\n%v\n", dir, err)
		var de *descriptors.Error
		if errors.As(err, &de) && de.DescriptorDir() != "" {
			fmt.Fprintf(stderr, "hint: point -config_dir (CONFIG_DIR) at the descriptor files only: -config_dir %s\n", de.DescriptorDir())
		}
		return exitFailure
	}
	var warnings []string
	for _, w := range cfg.Warnings() {
		warnings = append(warnings, w.Error())
	}
	switch {
	case len(cfg.Domains()) == 0:
		warnings = append(warnings, fmt.Sprintf("%s: no descriptor files (0 domains, 0 rules): the service would answer every request OK", dir))
	case len(cfg.Rules()) == 0:
		warnings = append(warnings, fmt.Sprintf("%s: 0 rules: the service would answer every request OK", dir))
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	summary := fmt.Sprintf("%s: %d domains, %d rules", dir, len(cfg.Domains()), len(cfg.Rules()))
	if n := countAdjustments(cfg); n > 0 {
		summary += ", " + plural(n, "adjustment")
	}
	switch {
	case len(warnings) > 0 && strict:
		fmt.Fprintf(stdout, "%s: %s: FAIL (-strict)\n", summary, plural(len(warnings), "warning"))
		return exitFailure
	case len(warnings) > 0:
		fmt.Fprintf(stdout, "%s: OK, %s (-strict fails on warnings)\n", summary, plural(len(warnings), "warning"))
	default:
		fmt.Fprintf(stdout, "%s: OK\n", summary)
	}
	return exitOK
}

// checkConfigDir reports a descriptor directory that is not there, naming
// the settings it came from, unless serve is told to start without one
// (FORCE_START_WITHOUT_INITIAL_CONFIG) or reads descriptors over xDS.
func checkConfigDir(s config.Settings) error {
	if s.ConfigType != config.ConfigTypeFile || s.ForceStartWithoutInitialConfig {
		return nil
	}
	dir := s.ConfigDir()
	info, err := os.Stat(dir)
	if err == nil && info.IsDir() {
		return nil
	}
	what := "does not exist"
	if err == nil {
		what = "is not a directory"
	} else if !errors.Is(err, os.ErrNotExist) {
		what = "cannot be read: " + err.Error()
	}
	if s.ConfigDirOverride != "" {
		return fmt.Errorf("descriptor directory %s (from -config_dir or CONFIG_DIR) %s: point -config_dir or CONFIG_DIR at the directory holding your descriptor YAML files", dir, what)
	}
	return fmt.Errorf("descriptor directory %s %s: it is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (%s, %q, %q); set -config_dir or CONFIG_DIR to the directory holding your descriptor YAML files, or set those three as for envoyproxy/ratelimit",
		dir, what, filepath.Clean(s.RuntimeRoot), s.RuntimeSubdirectory, s.RuntimeAppDirectory)
}

// checkAdjustments checks, over xDS, the directory of adjustments for the
// pushed rules as serve loads it: the files' domain: and adjustments:
// (descriptors: there are ignored, with a warning). Their limit names can
// only be checked against the rules, when they arrive; serve logs those
// that select none.
func checkAdjustments(s config.Settings, dir string, stdout, stderr io.Writer) int {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && s.ConfigDirOverride == "" {
		fmt.Fprintf(stdout, "%s: no adjustments directory; the rules come over xDS: OK\n", dir)
		return exitOK
	}
	cfg, err := adjustmentsLoader(s)(dir)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit check-config: %s does not load:\n%v\n", dir, err)
		return exitFailure
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w.Error())
	}
	fmt.Fprintf(stdout, "%s: %s for rules pushed over xDS: OK (the limits they name are checked when the rules arrive)\n", dir, plural(countAdjustments(cfg), "adjustment"))
	return exitOK
}

// countAdjustments counts the adjustments of every domain of cfg.
func countAdjustments(cfg *descriptors.Config) int {
	n := 0
	for _, d := range cfg.AdjustedDomains() {
		n += len(cfg.Adjustments(d))
	}
	return n
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
