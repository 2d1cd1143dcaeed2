// Package conformance runs two suites written elsewhere against both gRPC
// transports (GRPC_TRANSPORT=native, internal/grpcserver, and
// GRPC_TRANSPORT=grpc-go, grpc-go's own server), so that the native
// transport is held to what the protocol's own tests ask of any server.
//
// h2spec (github.com/summerwind/h2spec v2.2.1, the HTTP/2 conformance
// suite for RFC 7540/9113 and HPACK) runs against the ratelimit binary on
// the embedded store (calls answered on the connection's reader) and on
// DynamoDB Local (calls on goroutines of their own), with its requests
// shaped as gRPC calls: POST, content-type application/grpc, te trailers.
// h2spec has no go.mod, so the test builds it from the module cache into
// .cache/h2spec/ at the repository root with the go.mod and go.sum pinned in
// testdata/ and that one patch to its request headers. No case may fail on
// native that passes on grpc-go; the cases that fail on both are listed in
// the test, each with its reason, beside the few whose expectation does not
// hold for the native transport's settings and those whose outcome depends
// on timing.
//
// grpc-go's interop client (google.golang.org/grpc/interop, at the grpc
// version of go.mod) runs every case of its interop/client that needs no
// Google credentials, xDS fleet or ORCA load-balancing policy (the others
// are listed, with the reason, and the test checks the two lists cover the
// client's cases) against interop.NewTestServer registered on a
// grpcserver.Server (with handlers inline and on goroutines) and on a
// grpc.Server, and gzip variants of the calls that carry payloads. Every case passes
// on each, or is listed as unsupported with its reason (compression on the
// native transport, which answers a compressed request Unimplemented).
//
// Nothing here skips but under -short, which builds neither the binary nor
// h2spec: a missing go toolchain, module proxy or Java fails the test.
package conformance
