// Package grpcserver is the service's gRPC server: HTTP/2 (RFC 9113) and
// the gRPC wire protocol, written for a service whose calls are small,
// unary and cheap, behind an Envoy that multiplexes thousands of them on
// one connection.
//
// grpc-go's server hands every call to a goroutine of its own, passes the
// request through a receive buffer, and queues the answer for a writer
// goroutine: three goroutine hand-offs and at least two system calls per
// call, which cost more than the decision. Here the connection's reader
// decodes a complete request, calls the handler where it stands when the
// handlers never wait (Options.Inline: the embedded store), appends the
// answer to the connection's write buffer, and writes once for everything
// it has read: one read and one write system call per batch of calls, and
// no goroutine per call. Handlers that wait (a store across the network)
// run on a goroutine each, as in grpc-go, and write their answer
// themselves; the first writer to find the buffer free writes what the
// others queued.
//
// It serves any grpc.ServiceDesc: unary methods with the same handler,
// codec and unary interceptors grpc-go would use, and streaming methods
// (health Watch, reflection) through a grpc.ServerStream, with HTTP/2 flow
// control in both directions. It implements grpc.ServiceRegistrar and the
// service-info provider reflection needs, so services register on it as
// they would on a *grpc.Server.
//
// Unary and streaming handlers may call grpc.SetHeader, grpc.SendHeader and
// grpc.SetTrailer, as on grpc-go's server.
//
// The connection is the service's network boundary, and every bound it
// keeps is one grpc-go's server, Go's HTTP/2 server or hyper keeps against
// a published attack (limits.go names each): a call holds its slot of
// MaxConcurrentStreams until its handler returns, even once reset; resets,
// control frames and empty frames have budgets per connection, and pings
// grpc-go's policy; every header block counts its encoded and decoded
// bytes, whatever stream it is for; DATA beyond the window granted is a
// FLOW_CONTROL_ERROR, and request bytes held are bounded per connection;
// queued output is bounded (the reader stops reading past it) and a write
// that makes no progress ends the connection; header blocks are checked as
// RFC 9113 §8.2–8.3 asks. Every goroutine of a call is owned by the
// server: Stop and GracefulStop wait for it.
//
// What it does not do, and grpc-go does: compressed requests (answered
// Unimplemented, as grpc-go answers a compressor it lacks; Envoy sends
// none), and stats handlers.
package grpcserver
