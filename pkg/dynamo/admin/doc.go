// Package admin is the operator's room of pkg/dynamo: it writes and reads
// what the decision store only reads, entity records and stored limits,
// keeps the audit log of every change, registers namespaces and takes them
// through their lifecycle (delete, recover, purge), and finds orphans.
//
// A Store shares the decision store's table handle (dynamo.Table) and
// drops that store's cached limits and entities it changes. It imports
// pkg/dynamo and pkg/dynamo/item; the decision store does not import it.
package admin
