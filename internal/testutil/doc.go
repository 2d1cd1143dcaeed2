// Package testutil is the one harness the module's tests share, in the
// shape of grpc-go's internal/testutils: free loopback ports (FreePort),
// a locked buffer for a process's output (LockedBuffer), the repository
// root (RepoRoot), a test PKI (NewPKI, NewAuthority), child processes
// stopped at cleanup with their output logged when the test failed
// (StartProcess, Launch), main packages of the repository built once per
// test binary (Build, Binary), Go tools at pinned versions built into
// .cache/ (InstallTool), and the ratelimit binary serving on ports of its
// own (StartServer, NewServer).
//
// The helpers that take a testing.TB fail it with the reason; for code
// that runs outside a test (a recorder, a TestMain), FindFreePort,
// FindRepoRoot, Launch and NewServer return the error instead. Build and
// Binary (and so StartServer without a Bin) skip the test under -short: the
// fast loop builds no binary. Nothing else here skips.
//
// Free ports are drawn below the kernel's ephemeral range, so that no
// outgoing connection's source port takes one before its server binds it,
// and none is handed out twice in a process; a Server whose port was taken
// anyway moves to new ones on its first start.
//
// Every process started here dies with the test binary (Pdeathsig). A
// Process, a Server and a LockedBuffer are safe for concurrent use.
package testutil
