package admin

import (
	"errors"
	"strconv"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The records the seams carry, the store's own types translated into
// them (Dynamo, Embedded), so that a store depends on no other store.

// BucketState is what a bucket holds on every shard (one, on a store
// that does not shard), read at At.
type BucketState struct {
	// Key is the bucket's key, its namespace resolved.
	Key cascade.Key
	// ShardCount is the bucket's shard count (1 when it has no item).
	ShardCount int
	Shards     []ShardState
	At         time.Time
}

// ShardState is what one shard of a bucket holds.
type ShardState struct {
	Shard int
	// Exists reports whether the shard has an item; one without is full.
	Exists bool
	// Limits are the shard's limits, by name.
	Limits []LimitState
}

// LimitState is what one limit of a shard holds.
type LimitState struct {
	Name string
	// Limit is the limit the level was written with, else the one asked
	// about.
	Limit tokenbucket.Limit
	// Tokens is what the shard holds now, negative in debt.
	Tokens tokenbucket.Millitokens
	// FullIn is how long until the limit is full again.
	FullIn time.Duration
	// Consumed is the millitokens debited so far (the usage counter; 0
	// on a store that keeps none).
	Consumed int64
	// Stored reports whether the shard holds a level for the limit.
	Stored bool
}

// Total is each limit of b summed over its shards, by name.
func (b BucketState) Total() map[string]LimitState {
	out := map[string]LimitState{}
	for _, sh := range b.Shards {
		for _, l := range sh.Limits {
			t := out[l.Name]
			t.Name, t.Limit, t.Stored = l.Name, l.Limit, t.Stored || l.Stored
			t.Tokens += l.Tokens
			t.Consumed += l.Consumed
			t.FullIn = max(t.FullIn, l.FullIn)
			out[l.Name] = t
		}
	}
	return out
}

// Scope is where limits are stored and audit records kept: the system,
// a resource, an entity, or an entity and a resource, in Namespace
// (empty: the store's).
type Scope struct {
	Namespace string
	System    bool
	Entity    string
	Resource  string
}

// String is the scope as the commands print it and audit records name it:
// system, resource "R", entity "E", entity "E" resource "R".
func (sc Scope) String() string {
	switch {
	case sc.System:
		return "system"
	case sc.Entity != "" && sc.Resource != "":
		return "entity " + strconv.Quote(sc.Entity) + " resource " + strconv.Quote(sc.Resource)
	case sc.Entity != "":
		return "entity " + strconv.Quote(sc.Entity)
	default:
		return "resource " + strconv.Quote(sc.Resource)
	}
}

// Entity is an entity record in Namespace (empty: the store's).
type Entity struct {
	Namespace string
	ID        string
	Parent    string
	Cascade   bool
}

// ChainLevel is one entity of a chain, with its stored limits.
type ChainLevel struct {
	// Entity is the entity's record; only its ID is set when Stored is
	// false.
	Entity Entity
	Stored bool
	// Limits are the limits stored for the entity and the resource asked
	// about, or else its default limits; nil when none.
	Limits map[string]tokenbucket.Limit
	// Scope is where Limits are stored; the zero Scope when none are.
	Scope Scope
}

// AuditRecord is one audited change.
type AuditRecord struct {
	ID        string // sorts by time
	At        time.Time
	Action    string // "limits.set", "entity.put", "namespace.register", "bucket.reset", …
	Scope     string // Scope.String of the scope changed
	Before    string
	After     string
	Principal string // who made it (empty when not known)
}

// Namespace is a namespace's registry record.
type Namespace struct {
	Name string
	ID   string // 12 hex digits
	// State is NamespaceActive, NamespaceDeleted or NamespacePurged.
	State string
	// Changed is when the state last changed (zero: never since it was
	// registered).
	Changed time.Time
}

// The states of a registered namespace (Namespace.State).
const (
	NamespaceActive  = "active"
	NamespaceDeleted = "deleted" // its items are kept: recover undoes it
	NamespacePurged  = "purged"  // its items were deleted
)

// Orphan is a namespace with items and no registry record.
type Orphan struct {
	Name  string
	Items int
}

// Window is a usage window.
type Window string

// The usage windows.
const (
	Hourly  Window = "hourly"
	Daily   Window = "daily"
	Monthly Window = "monthly"
)

// UsageSnapshot is what an entity consumed of a resource in a window, by
// limit, in millitokens.
type UsageSnapshot struct {
	Namespace string
	Entity    string
	Resource  string
	Window    Window
	Start     time.Time // the window's start, UTC
	Limits    map[string]int64
}

// The errors the seams' methods wrap.
var (
	// ErrNotFound: no such record (entity, stored limits, namespace).
	ErrNotFound = errors.New("admin: not found")
	// ErrNamespaceActive: a purge of a namespace still active.
	ErrNamespaceActive = errors.New("admin: namespace is active")
	// ErrNoSuchLimit: a top-up of a limit the bucket does not hold.
	ErrNoSuchLimit = errors.New("admin: the bucket holds no limit of that name")
)
