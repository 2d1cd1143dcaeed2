package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(Main(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `usage: ratelimit [command] [flags]

commands:
  serve          serve the rate-limit service (default)
  check-config   load a descriptor directory and list every problem
                 (ratelimit check-config -config_dir DIR)
  settings       list every setting, its default and meaning
  table          DynamoDB: table create
  namespace      DynamoDB: namespace register|list
  limits         DynamoDB: limits set|get|delete
  entity         DynamoDB: entity create|show
  help           this text

Settings come from the environment; flags override them: a flag's name is the
variable's name in lower case (GRPC_PORT → -grpc_port). Run
'ratelimit serve -h' for the flags.
`

// Main runs the binary with the given arguments and environment and returns
// its exit code: 0 on success, 1 on failure, 2 on bad usage.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, getenv, stderr)
	case "check-config":
		return checkConfig(args, getenv, stdout, stderr)
	case "settings":
		return printSettings(stdout)
	case "table", "namespace", "limits", "entity":
		return adminCommand(ctx, cmd, args, getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ratelimit: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}
