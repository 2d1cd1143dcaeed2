// Package warm readies a DynamoDB store for its first decisions before the
// service reports ready: it resolves credentials, checks the table's key
// schema, and opens connections with every kind of call a decision makes,
// on warm-up items of its own (Run).
package warm
