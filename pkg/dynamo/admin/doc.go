// Package admin is the operator's room of pkg/dynamo: it writes and reads
// what the decision store only reads, entity records and stored limits,
// keeps the audit log of every change (its writer too), registers
// namespaces and takes them through their lifecycle (delete, recover,
// purge), and finds orphans. It holds the bucket verbs too: Bucket reads
// every shard of a bucket, ResetBucket refills it and TopUp credits one of
// its limits (each one audited transaction), Status reads one shard and
// SetShards pre-shards a new bucket.
//
// A Store shares the decision store's table handle (dynamo.Table) and
// tells that store what it changed or saw through the store's hooks: it
// drops the cached limits, entities and bucket images it rewrote
// (ForgetConfig, ForgetEntity, ForgetBucket) and has the store learn the
// shard counts it read or wrote (LearnBucket). It imports pkg/dynamo and
// pkg/dynamo/item; the decision store does not import it.
package admin
