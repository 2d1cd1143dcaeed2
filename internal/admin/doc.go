// Package admin implements the operator's commands of the ratelimit
// binary: table create, namespace
// register|list|show|delete|recover|orphans|purge, limits set|get|delete,
// entity create|show, bucket show|reset|topup, audit list and usage
// list|summary, with their help. Run parses one command line, runs it on
// the store and writes human-readable results to stdout.
//
// The commands depend on interfaces this package owns, one per job of the
// store (seams.go): Buckets (bucket show, reset, topup), Entities (entity
// records and stored limits), Audit, Namespaces (the registry and the
// lifecycle) and Usage. Stores gathers a store's, nil for a job it does
// not keep: a verb of that job answers one error, wrapping
// ErrUnsupported, that names the store and what it does not keep (the
// admin API answers it 501). Dynamo is *dynamo.Store for every job;
// Embedded is the embedded store (internal/memstore) for buckets only;
// Redis is the Redis store (internal/redisstore) for every job (its
// records translated in redisrecords.go and redisnamespaces.go). The
// records the interfaces carry and the errors they wrap (records.go) are
// this package's: each adapter translates its store's into them
// (dynamorecords.go), so no store depends on another. RunOn runs a command
// line on given Stores; internal/admintest runs the operator's scenarios
// through it on every store.
//
// Run opens DynamoDB once per command. Settings are serve's
// (internal/config): DYNAMODB_TABLE, DYNAMODB_ENDPOINT,
// AWS_REGION, NAMESPACE and BACKEND_TIMEOUT from the environment, with the
// same defaults, overridden by flags of the same names (-dynamodb_table,
// -dynamodb_endpoint, -aws_region, -namespace, -backend_timeout);
// -table, -endpoint and -region are aliases. An error about the command line
// is a *UsageError (wrapping ErrUsage) naming the command whose help to
// point at. Explain turns a missing table or missing credentials into what
// to do. Deleting limits that are not stored succeeds and says so. Every
// change writes an audit record (the store does it) naming -principal,
// else $USER, else the OS user (PrincipalOf the call's context). bucket
// show only reads; namespace purge runs only with -yes.
//
// API serves the same commands over HTTP on the service's debug listener
// (ADMIN_API): bucket show|reset|topup, usage, audit list, stored limits
// and entities, namespace register and the namespace lifecycle, parsed and run by the same code as the command
// line, on the serving process's settings, live configuration and store
// (the Stores it is given: Embedded, Redis, or a Dynamo over the store it
// decides on). With -admin_url, Run sends such a command to a service's
// API instead of running it.
//
// Run, RunOn and API hold no state between calls and are safe for
// concurrent use; so is Dynamo.
package admin
