// Package item is the DynamoDB table's schema: the keys of its items
// (keys.go), the encoding of a bucket item's attributes (codec.go) and of
// a config record's stored limits (limits.go), and the Update and
// condition expressions written to them (expr.go).
//
// It is the lowest room of pkg/dynamo: it imports no other package of it,
// and every other one reads and writes the table through it.
package item
