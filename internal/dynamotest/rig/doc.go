// Package rig is what the tests of the DynamoDB store's rooms
// (pkg/dynamo and pkg/dynamo/admin) share: a settable clock, a table on the
// fake or on DynamoDB Local, stores on it, limits, and the errors the fake
// is made to answer with.
package rig
