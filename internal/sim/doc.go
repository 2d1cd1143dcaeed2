// Command sim runs fleets of the DynamoDB store (pkg/dynamo, optionally
// behind internal/degrade, ON_UNAVAILABLE=local) in one process, on the fake
// DynamoDB of internal/dynamotest laid out as an on-demand table
// (dynamotest.OnDemand: hashed partitions of 1,000 write and 3,000 read
// units a second, warm at 4,000 write units, splits, a hot item isolated and
// still capped, DynamoDB's latencies and transaction conflicts), inside a
// testing/synctest bubble: a simulated second costs what the store's code
// costs, not a second. No gRPC and no wire protocol: only the store's
// decisions, their timing and their writes.
//
// Each scenario (scenarios.go) names the fleet and its demand: one hot
// tenant or Zipf over many, open-loop arrivals or closed-loop callers,
// bursts, replicas joining and leaving, a partition throttled, DynamoDB
// not answering. It prints a table: per window, admitted against allowed,
// write and read units per decision, throttles, the hot bucket's shards and
// the table's partitions; the decision latency's p50 and p99; dollars per
// million decisions at the on-demand prices of prices.go.
//
//	go run ./internal/sim -scenario hot [-scale 0.1] [-seconds 60]
//	make simulate SCENARIO=hot
//
// The tests of the package hold each scenario's bound on a short version
// of it; docs/scale.md holds the report, the model's assumptions and their
// sources.
package main
