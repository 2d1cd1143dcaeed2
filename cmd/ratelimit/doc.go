// Command ratelimit is the dynalimit binary: the Envoy rate-limit service and
// its tools.
//
//	ratelimit [serve] [flags]        serve gRPC, HTTP and debug (the default)
//	ratelimit check-config [flags]   load a descriptor directory and report every problem
//	ratelimit settings               list every setting with its default
//	ratelimit table|namespace|limits|entity ...   DynamoDB administration
//
// Settings come from the environment; a flag of the same name in lower case
// overrides it (GRPC_PORT → -grpc_port).
package main
