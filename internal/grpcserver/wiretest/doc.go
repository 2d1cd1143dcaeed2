// Package wiretest drives a gRPC server over an in-memory connection, one
// call at a time, with a client that allocates nothing once it is warm: so
// that testing.AllocsPerRun and benchmarks count the server's allocations
// per call, transport included, and nothing else.
package wiretest
