package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runMain runs Main in-process with env as the whole environment.
func runMain(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestCommandList: -h, -help, --help alone and `help` print the command
// list, one line per command, and exit 0.
func TestCommandList(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"-help"}, {"--help"}, {"help"}} {
		code, out, errOut := runMain(t, nil, args...)
		if code != 0 || errOut != "" {
			t.Errorf("Main(%q) = exit %d, stderr %q, want 0 and nothing", args, code, errOut)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "\n  "+c.name+" ") {
				t.Errorf("Main(%q) command list lacks a line for %s:\n%s", args, c.name, out)
			}
		}
		if strings.Contains(out, "-grpc_port  GRPC_PORT") {
			t.Errorf("Main(%q) printed serve's flags, want the command list", args)
		}
	}
}

// TestHelpEveryCommand: every command and subcommand answers -h, and `help
// COMMAND` the same, on stdout with exit 0; each help names its usage, its
// flags and an example.
func TestHelpEveryCommand(t *testing.T) {
	paths := [][]string{
		{"serve"}, {"check-config"}, {"settings"}, {"help"},
		{"table"}, {"table", "create"},
		{"namespace"}, {"namespace", "register"}, {"namespace", "list"},
		{"limits"}, {"limits", "set"}, {"limits", "get"}, {"limits", "delete"},
		{"entity"}, {"entity", "create"}, {"entity", "show"},
		{"namespace", "show"}, {"namespace", "delete"}, {"namespace", "recover"}, {"namespace", "orphans"}, {"namespace", "purge"},
		{"bucket"}, {"bucket", "show"}, {"bucket", "reset"},
		{"audit"}, {"audit", "list"},
	}
	for _, p := range paths {
		t.Run(strings.Join(p, " "), func(t *testing.T) {
			code, out, errOut := runMain(t, nil, append(p, "-h")...)
			if code != 0 || errOut != "" {
				t.Fatalf("Main(%q -h) = exit %d, stderr %q, want 0 and nothing", p, code, errOut)
			}
			if !strings.HasPrefix(out, "Usage: ratelimit ") || !strings.Contains(out, "Example") {
				t.Errorf("Main(%q -h) =\n%s\nwant a usage line and examples", p, out)
			}
			if p[0] != "settings" && p[0] != "help" && !strings.Contains(out, "\n  -") {
				t.Errorf("Main(%q -h) =\n%s\nwant its flags", p, out)
			}
			if len(p) == 2 && strings.Contains(out, "ID") && !strings.Contains(out, "Arguments:") {
				t.Errorf("Main(%q -h) =\n%s\nwant its arguments", p, out)
			}
			if p[0] == "help" {
				return
			}
			code, viaHelp, _ := runMain(t, nil, append([]string{"help"}, p...)...)
			if code != 0 || viaHelp != out {
				t.Errorf("Main(help %q) = exit %d,\n%s\nwant exit 0 and the same text as -h", p, code, viaHelp)
			}
		})
	}
	// serve's help groups its flags.
	_, out, _ := runMain(t, nil, "serve", "-h")
	for _, group := range []string{"\nListeners:\n", "\nDescriptor files (CONFIG_TYPE=file):\n", "\nStore failures and DynamoDB (BACKEND_TYPE=dynamodb):\n"} {
		if !strings.Contains(out, group) {
			t.Errorf("serve -h lacks the group %q", group)
		}
	}
	// A flag then -h is serve's help, as serve is the default.
	if code, out, _ := runMain(t, nil, "-grpc_port", "9000", "-h"); code != 0 || !strings.HasPrefix(out, "Usage: ratelimit [serve]") {
		t.Errorf("Main(-grpc_port 9000 -h) = exit %d %q, want serve's help", code, out)
	}
}

// TestUsageErrors pins each usage error: exit 2, nothing on stdout, one line
// saying what is wrong and one pointing at the help. None reaches DynamoDB
// (the endpoint is a closed port).
func TestUsageErrors(t *testing.T) {
	env := map[string]string{"DYNAMODB_ENDPOINT": "http://127.0.0.1:1"}
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"frobnicate"}, nil, "ratelimit: unknown command \"frobnicate\"\nRun 'ratelimit -h' for the commands.\n"},
		{[]string{"limitz", "get"}, nil, "ratelimit: unknown command \"limitz\"; did you mean \"limits\"?\nRun 'ratelimit -h' for the commands.\n"},
		{[]string{"check"}, nil, "ratelimit: unknown command \"check\"; did you mean \"check-config\"?\nRun 'ratelimit -h' for the commands.\n"},
		{[]string{"help", "nope"}, nil, "ratelimit: unknown command \"nope\"\nRun 'ratelimit -h' for the commands.\n"},
		{[]string{"serve", "-no_such_flag"}, nil, "ratelimit serve: unknown flag -no_such_flag\nRun 'ratelimit serve -h' for usage.\n"},
		{[]string{"-grpc_prot", "9000"}, nil, "ratelimit serve: unknown flag -grpc_prot; did you mean -grpc_port?\nRun 'ratelimit serve -h' for usage.\n"},
		{[]string{"serve", "extra"}, nil, "ratelimit serve: unexpected argument \"extra\" (serve takes flags only)\nRun 'ratelimit serve -h' for usage.\n"},
		{[]string{"serve", "../../examples/config"}, nil, "ratelimit serve: unexpected argument \"../../examples/config\" (serve takes flags only)\nName the descriptor directory with -config_dir: ratelimit serve -config_dir ../../examples/config\nRun 'ratelimit serve -h' for usage.\n"},
		{[]string{"check-config", "../../examples/config"}, nil, "ratelimit check-config: unexpected argument \"../../examples/config\" (check-config takes flags only)\nName the descriptor directory with -config_dir: ratelimit check-config -config_dir ../../examples/config\nRun 'ratelimit check-config -h' for usage.\n"},
		{[]string{"check-config", "-strict", "config"}, nil, "ratelimit check-config: unexpected argument \"config\" (check-config takes flags only)\nName the descriptor directory with -config_dir: ratelimit check-config -config_dir config\nRun 'ratelimit check-config -h' for usage.\n"},
		{[]string{"serve", "-grpc_port", "x"}, nil, "ratelimit serve: invalid value \"x\" for flag -grpc_port: not an integer\nRun 'ratelimit serve -h' for usage.\n"},
		{[]string{"serve"}, map[string]string{"GRPC_PORT": "x"}, "ratelimit serve: config: GRPC_PORT=\"x\": not an integer\nRun 'ratelimit settings' for every setting, its default and meaning.\n"},
		{[]string{"serve"}, map[string]string{"BACKEND_TYPE": "dynamo"}, "ratelimit serve: config: BACKEND_TYPE=\"dynamo\": want one of memory, dynamodb, redis\nRun 'ratelimit settings' for every setting, its default and meaning.\n"},
		{[]string{"check-config", "-x"}, nil, "ratelimit check-config: unknown flag -x\nRun 'ratelimit check-config -h' for usage.\n"},
		{[]string{"settings", "x"}, nil, "ratelimit settings: takes no arguments, got \"x\"\nRun 'ratelimit settings -h' for usage.\n"},
		{[]string{"entity"}, env, "ratelimit entity: missing command (create or show)\nRun 'ratelimit entity -h' for usage.\n"},
		{[]string{"entity", "show"}, env, "ratelimit entity show: missing ID\nRun 'ratelimit entity show -h' for usage.\n"},
		{[]string{"entity", "create", "a", "b"}, env, "ratelimit entity create: takes one ID, got 2: a b\nRun 'ratelimit entity create -h' for usage.\n"},
		{[]string{"entity", "create", "a", "-system"}, env, "ratelimit entity create: unknown flag -system\nRun 'ratelimit entity create -h' for usage.\n"},
		{[]string{"limits", "frob"}, env, "ratelimit limits: unknown command \"limits frob\"\nRun 'ratelimit limits -h' for usage.\n"},
		{[]string{"limits", "gte", "-system"}, env, "ratelimit limits: unknown command \"limits gte\"; did you mean \"get\"?\nRun 'ratelimit limits -h' for usage.\n"},
		{[]string{"limits", "get"}, env, "ratelimit limits get: missing SCOPE: name one of -system, -resource R, or -entity E [-resource R]\nRun 'ratelimit limits get -h' for usage.\n"},
		{[]string{"limits", "get", "-system", "-entity", "e"}, env, "ratelimit limits get: -system takes no -entity or -resource\nRun 'ratelimit limits get -h' for usage.\n"},
		{[]string{"limits", "set", "-system"}, env, "ratelimit limits set: missing SPEC (name:rate[/unit][:burst])\nRun 'ratelimit limits set -h' for usage.\n"},
		{[]string{"limits", "set"}, env, "ratelimit limits set: missing SCOPE: name one of -system, -resource R, or -entity E [-resource R]\nRun 'ratelimit limits set -h' for usage.\n"},
		{[]string{"limits", "set", "rpm:10/min"}, env, "ratelimit limits set: missing SCOPE: name one of -system, -resource R, or -entity E [-resource R]\nRun 'ratelimit limits set -h' for usage.\n"},
		{[]string{"limits", "set", "-resource", "example"}, env, "ratelimit limits set: missing SPEC (name:rate[/unit][:burst])\nRun 'ratelimit limits set -h' for usage.\n"},
		{[]string{"limits", "set", "-system", "rpm:10/week"}, env, "ratelimit limits set: dynamo: limit \"rpm:10/week\": unknown unit \"week\" (sec, min, hour, day)\nRun 'ratelimit limits set -h' for usage.\n"},
		{[]string{"limits", "get", "-systm"}, env, "ratelimit limits get: unknown flag -systm; did you mean -system?\nRun 'ratelimit limits get -h' for usage.\n"},
		{[]string{"table", "create", "extra"}, env, "ratelimit table create: takes no arguments, got \"extra\"\nRun 'ratelimit table create -h' for usage.\n"},
		{[]string{"namespace", "register"}, env, "ratelimit namespace register: missing NAME\nRun 'ratelimit namespace register -h' for usage.\n"},
		{[]string{"namespace", "list", "-dynamodb_table", ""}, env, "ratelimit namespace list: DYNAMODB_TABLE is empty: set it or its flag (-dynamodb_table)\nRun 'ratelimit namespace list -h' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runMain(t, tt.env, tt.args...)
			if code != 2 || out != "" || errOut != tt.want {
				t.Errorf("Main(%q) = exit %d, stdout %q, stderr\n%q\nwant exit 2, nothing, and\n%q", tt.args, code, out, errOut, tt.want)
			}
		})
	}
}

// TestNoArgumentsServe: with no arguments, or flags only, the binary
// serves (envoyproxy/ratelimit's image runs it bare): here it gets as far
// as the descriptor directory, which the message names with the settings
// it came from.
func TestNoArgumentsServe(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bare", nil, nil,
			"ratelimit serve: descriptor directory /srv/runtime_data/current/config does not exist: it is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (/srv/runtime_data/current, \"\", \"config\"); set -config_dir or CONFIG_DIR to the directory holding your descriptor YAML files, or set those three as for envoyproxy/ratelimit\n"},
		{"runtime settings", []string{"--quotaRateLimitServiceAddr=x:1"}, map[string]string{"RUNTIME_ROOT": "/nonexistent", "RUNTIME_SUBDIRECTORY": "ratelimit"},
			"ratelimit serve: descriptor directory /nonexistent/ratelimit/config does not exist: it is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (/nonexistent, \"ratelimit\", \"config\"); set -config_dir or CONFIG_DIR to the directory holding your descriptor YAML files, or set those three as for envoyproxy/ratelimit\n"},
		{"config_dir flag", []string{"-config_dir", "/nonexistent"}, nil,
			"ratelimit serve: descriptor directory /nonexistent (from -config_dir or CONFIG_DIR) does not exist: point -config_dir or CONFIG_DIR at the directory holding your descriptor YAML files\n"},
		{"a file", []string{"-config_dir", "cli_test.go"}, nil,
			"ratelimit serve: descriptor directory cli_test.go (from -config_dir or CONFIG_DIR) is not a directory: point -config_dir or CONFIG_DIR at the directory holding your descriptor YAML files\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runMain(t, tt.env, tt.args...)
			if code != 1 || errOut != tt.want {
				t.Errorf("Main(%q) = exit %d, stderr\n%q\nwant exit 1 and\n%q", tt.args, code, errOut, tt.want)
			}
		})
	}
}

// TestServeBusyPort: serve on a port another process holds stops with the
// message that names the setting that moves it.
func TestServeBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().(*net.TCPAddr)
	env := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": strconv.Itoa(addr.Port),
		"HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
	code, _, errOut := runMain(t, env, "serve", "-config_dir", filepath.Join("..", "..", "examples", "config"))
	want := "server: gRPC listener " + addr.String() + ": address already in use (is another ratelimit running? set GRPC_PORT or -grpc_port (GRPC_HOST or -grpc_host for the address) to move it)"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("serve on a busy gRPC port = exit %d,\n%s\nwant exit 1 and %q", code, errOut, want)
	}
}

// TestNoPackagePrefixes: an admin command's error reads without the
// store packages' prefixes.
func TestNoPackagePrefixes(t *testing.T) {
	for in, want := range map[string]string{
		`dynamo: the bucket holds no limit of that name: "nosuch"`:                   `the bucket holds no limit of that name: "nosuch"`,
		`admin API at http://x: Internal Server Error: dynamo: call failed: timeout`: `admin API at http://x: Internal Server Error: call failed: timeout`,
		`admin: no descriptor configuration loaded yet`:                              `no descriptor configuration loaded yet`,
		`-usd 1: want dollars`:           `-usd 1: want dollars`,
		`entity "dynamo" does not exist`: `entity "dynamo" does not exist`,
	} {
		if got := plainError(errors.New(in)); got != want {
			t.Errorf("plainError(%q) = %q, want %q", in, got, want)
		}
	}
}
