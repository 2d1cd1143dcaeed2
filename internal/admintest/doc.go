// Package admintest is the one suite of the operator's commands that every
// store runs, as internal/storetest is for decisions: the embedded store
// (admin.Embedded over internal/memstore), DynamoDB (admin.Dynamo, on
// DynamoDB Local) and a store built to the interfaces alone (a map, in
// internal/admin's tests), which is the next store's checklist.
//
// Run runs each scenario as an operator would, through admin.RunOn: the
// command lines of the verbs, their output and their errors.
//
//   - buckets (admin.Buckets): bucket show drains nothing and reads what
//     decisions (Store.Acquire) consumed; bucket reset refills it and says
//     what it held; bucket topup credits one limit, never past its
//     capacity, and refuses a limit the bucket does not hold; a bucket
//     never written is full and nothing is reset.
//   - entities (admin.Entities): limits set merges over what is stored,
//     limits get reads it back, limits delete deletes named limits or all
//     and says when nothing was there; entity create and show: children,
//     the chain up the parents, a cycle refused, a missing entity
//     ErrNotFound; with buckets, each level's bucket.
//   - audit (admin.Audit): every write above leaves a record naming its
//     principal, oldest first, by scope.
//   - namespaces (admin.Namespaces): register (idempotent), list, show,
//     delete, recover, purge (refused while active), orphans.
//   - usage (admin.Usage): usage list and summary of what Store.AddUsage
//     recorded, by window.
//
// A store declares the jobs it keeps (Store.Implements): the suite checks
// that its admin.Stores keeps exactly those, and that every verb of each
// other job answers an error wrapping admin.ErrUnsupported that names the
// store. Nothing is skipped: a job is run or checked unsupported.
//
// The suite's own test runs it on stores broken one way each (a job kept
// but not declared, declared but not kept, a reset that refills nothing)
// and checks that the scenarios that must fail do.
//
// Every scenario gets a namespace of its own (Factory's ns), so one
// DynamoDB table serves the whole suite.
package admintest
