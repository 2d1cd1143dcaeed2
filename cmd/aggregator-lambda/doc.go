// Command aggregator-lambda is the usage aggregator as an AWS Lambda
// function: the event source mapping of the table's stream
// (NEW_AND_OLD_IMAGES, FunctionResponseTypes ReportBatchItemFailures)
// invokes it with batches of records, and it hands each batch to
// pkg/dynamo/usage, which adds the records' usage to the hourly, daily
// and monthly snapshots at most once per record.
//
// It answers with the records it could not apply as BatchItemFailures
// (their sequence numbers): Lambda retries from the first of them, and
// the records after it that were applied are found applied again and
// skipped. A batch the handler cannot start (settings that do not parse,
// no client) fails as a whole.
//
// Settings are the binary's (internal/config), from the environment:
// DYNAMODB_TABLE, AWS_REGION, DYNAMODB_ENDPOINT, NAMESPACE,
// USAGE_RETENTION and BACKEND_TIMEOUT. Nothing calls AWS at start: the
// client and the store are made on the first invocation (and again on the
// next one when that failed), so an import or an init phase never waits on
// the network.
//
// Built for the provided.al2023 runtime as a file named bootstrap:
// `make lambda` writes dist/aggregator-lambda-{arm64,amd64}.zip. See
// docs/usage.md.
package main
