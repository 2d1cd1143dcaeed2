// Package server runs the service's three listeners and their lifecycle.
//
//   - gRPC (GRPC_HOST:GRPC_PORT, 8081): the rate-limit service
//     (envoy.service.ratelimit.v3), grpc.health.v1 and server reflection, with
//     optional TLS or mTLS;
//   - HTTP (HOST:PORT, 8080): /healthcheck and /json;
//   - debug (DEBUG_HOST:DEBUG_PORT, 6070): /metrics, /rlconfig and pprof.
//
// Shutdown follows Envoy's expectations: when Run's context ends, health turns
// NOT_SERVING (so Envoy and load balancers stop sending), the server keeps
// answering for the drain period, then gRPC stops gracefully and is stopped
// hard if the graceful stop outlasts its deadline. Run returns only after every
// listener and goroutine it started has stopped.
package server
