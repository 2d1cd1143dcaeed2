// Command ratelimit is the dynalimit binary: the Envoy rate-limit service and
// its tools.
//
//	ratelimit [serve] [flags]        serve gRPC, HTTP and debug (the default)
//	ratelimit check-config [flags]   load a descriptor directory and report every problem
//	ratelimit settings               list every setting with its default
//	ratelimit table|namespace|limits|entity ...   DynamoDB administration
//	ratelimit help [COMMAND]         the command list, or a command's help
//
// With no arguments, or a flag first, it serves: envoyproxy/ratelimit's image
// runs /bin/ratelimit bare and Envoy Gateway adds --name=value flags. -h,
// -help or --help alone print the command list; COMMAND -h a command's help.
//
// Settings come from the environment; a flag of the same name in lower case
// overrides it (GRPC_PORT → -grpc_port). The DynamoDB commands read the same
// settings as serve, with the same defaults.
//
// Exit status: 0 success (help included), 1 failure, 2 bad usage (an
// unknown command or flag, wrong arguments, a setting that does not parse),
// reported on one line with a pointer to the command's help.
package main
