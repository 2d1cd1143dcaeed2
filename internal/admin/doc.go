// Package admin implements the DynamoDB admin subcommands of the ratelimit
// binary: table create, namespace register|list, limits set|get|delete and
// entity create|show. Run parses one command line, talks to the table
// through pkg/dynamo and writes human-readable results to stdout.
//
// Settings come from flags (-table, -endpoint, -region, -namespace) that
// default to DYNAMODB_TABLE, DYNAMODB_ENDPOINT, AWS_REGION and NAMESPACE.
// Every config change writes an audit record (pkg/dynamo does it).
//
// Run holds no state between calls and is safe for concurrent use.
package admin
