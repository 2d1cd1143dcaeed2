package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/dynalimit/dynalimit/internal/config"
)

// settingGroups titles the settings' groups by the first variable of each,
// in config.Table's order; a variable added later falls in the group above
// it.
var settingGroups = map[string]string{
	"HOST":                           "Listeners",
	"RUNTIME_ROOT":                   "Descriptor files (CONFIG_TYPE=file)",
	"CONFIG_TYPE":                    "Descriptors over xDS (CONFIG_TYPE=grpc_xds_sotw)",
	"TRACING_ENABLED":                "Tracing",
	"LOG_LEVEL":                      "Logging",
	"BACKEND_TYPE":                   "Decisions",
	"LIMIT_RESPONSE_HEADERS_ENABLED": "Response headers and metadata",
	"REQUEST_MAX_DESCRIPTORS":        "Request bounds",
	"GRPC_SERVER_USE_TLS":            "gRPC TLS and connections",
	"HTTP_READ_HEADER_TIMEOUT":       "HTTP and debug listeners",
	"USE_PROMETHEUS":                 "Metrics",
	"SHUTDOWN_DRAIN":                 "Shutdown",
	"MEMORY_MAX_BUCKETS":             "Memory store (BACKEND_TYPE=memory)",
	"ON_UNAVAILABLE":                 "Store failures and DynamoDB (BACKEND_TYPE=dynamodb)",
}

// printSettingFlags writes the flags of the settings keep selects (all when
// nil), grouped, each with its variable, default and meaning.
func printSettingFlags(w io.Writer, keep func(name string) bool) {
	title := ""
	for _, v := range config.Table() {
		if t, ok := settingGroups[v.Name]; ok {
			title = t
		}
		if keep != nil && !keep(v.Name) {
			continue
		}
		if title != "" {
			fmt.Fprintf(w, "\n%s:\n", title)
			title = ""
		}
		def := v.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%s  %s=%s\n", strings.ToLower(v.Name), v.Name, def)
		wrap(w, v.Help, "      ", 78)
	}
}

// wrap writes text word-wrapped to width, each line after indent.
func wrap(w io.Writer, text, indent string, width int) {
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		fmt.Fprintln(w, line)
	}
}

func printServeHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: ratelimit [serve] [flags]

Serves the rate-limit service: gRPC (envoy.service.ratelimit.v3, health,
reflection) on GRPC_HOST:GRPC_PORT, HTTP (/healthcheck, /json) on HOST:PORT,
and /metrics (pprof with DEBUG_PPROF, the admin API with ADMIN_API) on
DEBUG_HOST:DEBUG_PORT, until SIGTERM or SIGINT.
serve is the default command: 'ratelimit' alone serves.

Every setting is an environment variable; the flag named as the variable in
lower case overrides it. Flags of envoyproxy/ratelimit's --name=value form
that serve does not define are ignored with a warning (Envoy Gateway passes
some).

Examples:
  ratelimit serve -config_dir examples/config
  CONFIG_DIR=examples/config BACKEND_TYPE=dynamodb DYNAMODB_ENDPOINT=http://localhost:8000 ratelimit
  ratelimit -grpc_port 9081 -port 9080 -debug_port 9070 -config_dir examples/config

Flags, by group (the flag, its variable and default, then its meaning):
`)
	printSettingFlags(w, nil)
}

// checkConfigSettings are the settings check-config reads; it accepts every
// serve flag so that serve's command line can be pasted.
var checkConfigSettings = map[string]bool{
	"RUNTIME_ROOT": true, "RUNTIME_SUBDIRECTORY": true, "RUNTIME_APPDIRECTORY": true,
	"RUNTIME_IGNOREDOTFILES": true, "CONFIG_DIR": true, "MERGE_DOMAIN_CONFIG": true, "QUOTA_MODE": true,
}

func printCheckConfigHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: ratelimit check-config [-strict] [flags]

Loads the descriptor directory as serve would (CONFIG_DIR, or
RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY) and reports every
problem of every file, each as FILE:LINE: KEY: MESSAGE, then prints
'DIR: N domains, M rules: OK'.

Warnings (keys ignored as envoyproxy/ratelimit ignores them, no descriptor
files in the directory, 0 rules) are printed and do not fail the check,
unless -strict.

Exit status: 0 the directory loads; 1 it does not, or -strict and a warning;
2 bad usage.

Flags:
  -strict
      Fail (exit 1) on any warning, an empty directory included: for CI.
`)
	printSettingFlags(w, func(name string) bool { return checkConfigSettings[name] })
	fmt.Fprint(w, `
check-config accepts every other serve flag too, and ignores it.

Examples:
  ratelimit check-config -config_dir examples/config
  CONFIG_DIR=/etc/ratelimit/config ratelimit check-config -strict
`)
}

func printSettingsHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: ratelimit settings

Lists every setting serve reads: its environment variable, its default and
what it does. The flag of each is the variable in lower case.

Example:
  ratelimit settings | grep DYNAMODB
`)
}
