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
// What it does not do, and grpc-go does: compressed requests (answered
// Unimplemented, as grpc-go answers a compressor it lacks; Envoy sends
// none), grpc.SetHeader from a unary handler (no call here uses it), stats
// handlers, and server keepalive pings (clients' pings are answered).
package grpcserver
