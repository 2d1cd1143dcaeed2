package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// checkConfig loads a descriptor directory the way serve does and reports
// every problem; exit 0 when every file loads.
func checkConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	s, code, err := loadSettings("check-config", args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "ratelimit check-config: %v\n", err)
		return code
	}
	dir := s.ConfigDir()
	cfg, err := s.Loader()(dir)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit check-config: %s does not load:\n%v\n", dir, err)
		return 1
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w.Error())
	}
	fmt.Fprintf(stdout, "%s: %d domains, %d rules: OK\n", dir, len(cfg.Domains()), len(cfg.Rules()))
	return 0
}
