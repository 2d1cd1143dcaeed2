// Package streampoll reads the table's DynamoDB stream and hands its
// records to the aggregator (pkg/dynamo/usage): `ratelimit aggregator`,
// for where the Lambda (cmd/aggregator-lambda) does not run (docker
// compose, Kubernetes, DynamoDB Local).
//
// One poller of a table reads at a time: it holds a lease item in the
// table (renewed each round, 15 s), and a second poller waits until the
// lease lapses. The poller reads every shard of the stream, a parent shard
// before its children, from its checkpoint in the table (the sequence
// number of the last record the aggregator applied), and moves the
// checkpoint after each batch the aggregator applied whole. A batch that
// failed, in part or whole, is read again from the checkpoint after a
// backoff: the aggregator counts a record delivered twice once, so a
// restart or a lost lease between a batch and its checkpoint counts
// nothing twice. A closed shard read to its end is checkpointed closed.
// The poller stops between batches when its context ends (SIGTERM).
package streampoll
