package admin

import "github.com/dynalimit/dynalimit/pkg/dynamo"

// The records the seams carry. They are pkg/dynamo's, named here so that
// the commands, the suite (internal/admintest) and any store name them
// from this package alone.
type (
	// BucketState is what a bucket holds on every shard (one, on a store
	// that does not shard).
	BucketState = dynamo.BucketState
	// ShardState is what one shard of a bucket holds.
	ShardState = dynamo.ShardState
	// LimitState is what one limit of a shard holds.
	LimitState = dynamo.LimitState
	// Scope is where limits are stored and audit records kept: the
	// system, a resource, an entity, or an entity and a resource.
	Scope = dynamo.Scope
	// Entity is an entity record.
	Entity = dynamo.Entity
	// ChainLevel is one entity of a chain, with its stored limits.
	ChainLevel = dynamo.ChainLevel
	// AuditRecord is one audited change.
	AuditRecord = dynamo.AuditRecord
	// Namespace is a namespace's registry record.
	Namespace = dynamo.Namespace
	// Orphan is a namespace with items and no registry record.
	Orphan = dynamo.Orphan
	// Window is a usage window: Hourly, Daily or Monthly.
	Window = dynamo.Window
	// UsageSnapshot is what an entity consumed of a resource in a window.
	UsageSnapshot = dynamo.UsageSnapshot
)

// The states of a registered namespace (Namespace.State).
const (
	NamespaceActive  = dynamo.NamespaceActive
	NamespaceDeleted = dynamo.NamespaceDeleted
	NamespacePurged  = dynamo.NamespacePurged
)

// The usage windows.
const (
	Hourly  = dynamo.Hourly
	Daily   = dynamo.Daily
	Monthly = dynamo.Monthly
)

// The errors the seams' methods wrap.
var (
	// ErrNotFound: no such record (entity, stored limits, namespace).
	ErrNotFound = dynamo.ErrNotFound
	// ErrNamespaceActive: a purge of a namespace still active.
	ErrNamespaceActive = dynamo.ErrNamespaceActive
	// ErrNoSuchLimit: a top-up of a limit the bucket does not hold.
	ErrNoSuchLimit = dynamo.ErrNoSuchLimit
)
