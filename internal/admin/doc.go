// Package admin implements the DynamoDB administration commands of the
// ratelimit binary: table create, namespace
// register|list|show|delete|recover|orphans|purge, limits set|get|delete,
// entity create|show, bucket show|reset, audit list and usage list|summary,
// with their help. Run parses one
// command line, talks to the table through pkg/dynamo and writes
// human-readable results to stdout.
//
// Settings are serve's (internal/config): DYNAMODB_TABLE, DYNAMODB_ENDPOINT,
// AWS_REGION, NAMESPACE and BACKEND_TIMEOUT from the environment, with the
// same defaults, overridden by flags of the same names (-dynamodb_table,
// -dynamodb_endpoint, -aws_region, -namespace, -backend_timeout);
// -table, -endpoint and -region are aliases. An error about the command line
// is a *UsageError (wrapping ErrUsage) naming the command whose help to
// point at. Explain turns a missing table or missing credentials into what
// to do. Deleting limits that are not stored succeeds and says so. Every
// change writes an audit record (pkg/dynamo does it) naming -principal,
// else $USER, else the OS user. bucket show only reads; namespace purge
// runs only with -yes.
//
// API serves the same commands over HTTP on the service's debug listener
// (ADMIN_API): bucket show|reset, usage, audit list and the namespace
// lifecycle, parsed and run by the same code as the command line, on the
// serving process's settings and live configuration; on the embedded
// store only bucket show and reset, through memstore's Inspect and Reset
// (a reset is audited by a log line), the rest answering 501. With
// -admin_url, Run sends such a command to a service's API instead of
// running it.
//
// Run and API hold no state between calls and are safe for concurrent use.
package admin
