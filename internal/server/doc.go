// Package server runs the service's three listeners and their lifecycle.
//
//   - gRPC (GRPC_HOST:GRPC_PORT, 8081): the rate-limit service
//     (envoy.service.ratelimit.v3), the services of Options.Services (the
//     binary's access-log sink and Rate Limit Quota Service),
//     grpc.health.v1 and server reflection, with optional TLS or mTLS;
//   - HTTP (HOST:PORT, 8080): /healthcheck and /json;
//   - debug (DEBUG_HOST:DEBUG_PORT, 6070): /metrics, /rlconfig and, when asked
//     for, pprof (DEBUG_PPROF) and the admin API at /admin/ (ADMIN_API);
//   - with PrometheusAddr (USE_PROMETHEUS), one more listener serving the
//     same metrics at PrometheusPath.
//
// gRPC listens on a unix socket instead of TCP when GRPCUDS is set (a stale
// socket file is replaced; the file is removed at stop). With WaitReady,
// health stays NOT_SERVING until SetReady(true) and follows it after; each
// condition named in Await (a store warming up) holds it NOT_SERVING the
// same way until Ready(name, true), while the listeners already answer, and
// /healthcheck's 503 names the conditions still awaited.
//
// The HTTP and debug servers cannot be starved by slow clients: a request
// must send its headers within the read-header timeout and all of itself
// within the read timeout, an idle kept-alive connection is closed after the
// idle timeout, and each server holds at most MaxConnections connections
// (by default a quarter of the open-file limit each, so that gRPC always has
// file descriptors left); further clients wait in the listen backlog. Their
// errors are logged through the logrus logger, with component=server and
// the listener's name.
//
// Shutdown follows Envoy's expectations: when Run's context ends, health turns
// NOT_SERVING (so Envoy and load balancers stop sending), the server keeps
// answering for the drain period, then every server stops gracefully at
// once under one timeout, after which connections are closed and in-flight
// gRPC calls cancelled. Run returns at most drain + timeout after its
// context ends, however long a handler runs; a listener failure stops
// everything at once and cuts a drain short. One supervisor owns every
// goroutine Run starts, and all of them have ended when Run returns (an HTTP
// handler that never returns is left behind: it holds no listener).
package server
