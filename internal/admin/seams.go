package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The operator's commands depend on these interfaces, one per job; a
// store implements the ones it keeps (Stores gathers them). Writes are
// audited by the store under PrincipalOf(ctx).

// Buckets is what bucket show, reset and top-up need of a store.
type Buckets interface {
	// Bucket reads what key's bucket holds, never consuming.
	Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, error)
	// ResetBucket refills key's bucket to capacity, audited, and returns
	// it as it was; false when it holds nothing (it is full).
	ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, bool, error)
	// TopUp credits amount to the limit named name of key's bucket, never
	// above its capacity, audited, and returns it as it was; false when it
	// holds nothing (it is full). A limit the bucket does not hold is an
	// error wrapping ErrNoSuchLimit.
	TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (BucketState, bool, error)
	// Ancestors are the stored ancestors key's debits cascade to (none on
	// a store that keeps no entities).
	Ancestors(ctx context.Context, key cascade.Key, max int) ([]cascade.Ancestor, error)
}

// Entities is what the entity and limits commands need of a store: entity
// records and the limits stored at a scope. A missing record or scope is
// an error wrapping ErrNotFound.
type Entities interface {
	// PutEntity creates or replaces an entity record, audited; a parent
	// that makes a cycle is refused.
	PutEntity(ctx context.Context, e Entity) error
	// Entity reads an entity record of namespace ns.
	Entity(ctx context.Context, ns, id string) (Entity, error)
	// Children lists the ids of the entities whose parent is id, sorted.
	Children(ctx context.Context, ns, id string) ([]string, error)
	// Chain returns id and its parents, nearest first, each with the
	// limits stored for it and resource (else its default limits), and
	// whether the walk stopped at a cycle.
	Chain(ctx context.Context, ns, id, resource string) ([]ChainLevel, bool, error)
	// SetLimits stores limits at sc, merged over those there, audited.
	SetLimits(ctx context.Context, sc Scope, limits map[string]tokenbucket.Limit) error
	// Limits reads the limits stored at sc.
	Limits(ctx context.Context, sc Scope) (map[string]tokenbucket.Limit, error)
	// DeleteLimits deletes the named limits at sc (all when none is
	// named), audited.
	DeleteLimits(ctx context.Context, sc Scope, names ...string) error
}

// Audit is what audit list needs of a store: the records its writes left.
type Audit interface {
	// Audit lists the audit records of sc, oldest first; at an entity
	// scope without a resource, every record of the entity.
	Audit(ctx context.Context, sc Scope) ([]AuditRecord, error)
}

// Namespaces is what the namespace commands need of a store: its
// registry and the lifecycle of the namespaces in it. A name not
// registered is an error wrapping ErrNotFound.
type Namespaces interface {
	// RegisterNamespace registers name (idempotent), audited.
	RegisterNamespace(ctx context.Context, name string) (Namespace, error)
	// Namespaces lists the registered namespaces by name.
	Namespaces(ctx context.Context) ([]Namespace, error)
	// Namespace reads the registry record of name.
	Namespace(ctx context.Context, name string) (Namespace, error)
	// DeleteNamespace marks an active namespace deleted, audited; false
	// when it was already.
	DeleteNamespace(ctx context.Context, name string) (bool, error)
	// RecoverNamespace marks a deleted or purged namespace active,
	// audited; false when it was already.
	RecoverNamespace(ctx context.Context, name string) (bool, error)
	// Orphans lists the namespaces with items and no registry record.
	Orphans(ctx context.Context) ([]Orphan, error)
	// PurgeNamespace deletes every item of a namespace not active
	// (ErrNamespaceActive otherwise), telling done the count so far, and
	// marks it purged, audited; it returns how many items it deleted.
	PurgeNamespace(ctx context.Context, name string, done func(deleted int)) (int, error)
}

// Usage is what usage list and summary need of a store: its usage
// history.
type Usage interface {
	// Usage returns the snapshots of entity (of resource, or every
	// resource when empty) in window w since the window holding since,
	// oldest first.
	Usage(ctx context.Context, ns, entity, resource string, w Window, since time.Time) ([]UsageSnapshot, error)
	// WindowUsage returns the snapshots of every entity of ns that used
	// resource in the window w holding at (usage top), read within the
	// store's bound: complete is false when it stopped at that bound.
	WindowUsage(ctx context.Context, ns, resource string, w Window, at time.Time) (snaps []UsageSnapshot, complete bool, err error)
}

// Local is where the serving replica decides a bucket now: on the shared
// store, or on its own buckets while the shared store fails the item
// (internal/degrade.Store under ON_UNAVAILABLE=local). Only the serving
// process knows it: bucket show reports it through the admin API.
type Local interface {
	// DecidedLocally reports whether the plans that debit key are
	// decided on this replica now.
	DecidedLocally(key cascade.Key) bool
}

// LocalIn is l over the keys the operator's commands name on a store whose
// own namespace is ns: the service's plans name that namespace "" (the
// store's default), bucket show names it ns.
func LocalIn(l Local, ns string) Local { return localIn{l, ns} }

type localIn struct {
	l  Local
	ns string
}

func (l localIn) DecidedLocally(key cascade.Key) bool {
	if l.l.DecidedLocally(key) {
		return true
	}
	if key.Namespace != l.ns {
		return false
	}
	key.Namespace = ""
	return l.l.DecidedLocally(key)
}

// Job is one of the operator's jobs a store may keep.
type Job int

// The jobs, one interface each.
const (
	JobBuckets    Job = iota + 1 // Buckets: bucket show, reset, topup
	JobEntities                  // Entities: entity create|show, limits set|get|delete
	JobAudit                     // Audit: audit list
	JobNamespaces                // Namespaces: namespace register|list|show|delete|recover|orphans|purge
	JobUsage                     // Usage: usage list|summary
)

// Jobs lists every job, in order.
var Jobs = []Job{JobBuckets, JobEntities, JobAudit, JobNamespaces, JobUsage}

// String is what the store keeps for the job, as the error of a verb it
// does not support names it: "audit records".
func (j Job) String() string {
	switch j {
	case JobBuckets:
		return "buckets"
	case JobEntities:
		return "entities and stored limits"
	case JobAudit:
		return "audit records"
	case JobNamespaces:
		return "a namespace registry"
	case JobUsage:
		return "usage history"
	}
	return fmt.Sprintf("job %d", int(j))
}

// Stores is the store the operator's commands run on, one interface per
// job, nil for a job the store does not keep: its verbs answer an error
// wrapping ErrUnsupported.
type Stores struct {
	// Name names the store in that error: "the embedded store
	// (BACKEND_TYPE=memory)".
	Name string
	// Instead says where the verbs it does not support run, after the
	// error ("use BACKEND_TYPE=dynamodb"); empty says nothing.
	Instead    string
	Buckets    Buckets
	Entities   Entities
	Audit      Audit
	Namespaces Namespaces
	Usage      Usage
	// Local tells bucket show where each level is decided now; nil when
	// the process does not decide on this store (the command line) or
	// never decides locally.
	Local Local
}

// Has reports whether the store keeps job j.
func (s Stores) Has(j Job) bool {
	switch j {
	case JobBuckets:
		return s.Buckets != nil
	case JobEntities:
		return s.Entities != nil
	case JobAudit:
		return s.Audit != nil
	case JobNamespaces:
		return s.Namespaces != nil
	case JobUsage:
		return s.Usage != nil
	}
	return false
}

// ErrUnsupported is wrapped by the error of a verb the store does not
// support (the admin API answers it 501).
var ErrUnsupported = errors.New("not supported by this store")

// unsupported is the one error of command on a store that does not keep
// job: "usage list: the embedded store (BACKEND_TYPE=memory) does not
// keep usage history; use BACKEND_TYPE=dynamodb".
func unsupported(command string, st Stores, j Job) error {
	msg := fmt.Sprintf("%s: %s does not keep %s", command, st.Name, j)
	if runs := RunsOn(st); len(runs) > 0 {
		msg += " (it runs " + joinAnd(runs) + ")"
	}
	if st.Instead != "" {
		msg += "; " + st.Instead
	}
	return &explained{msg, ErrUnsupported}
}

// RunsOn lists the commands the admin API runs on st, in the order of
// the command list: the verbs of the jobs st keeps ("bucket show").
func RunsOn(st Stores) []string {
	var out []string
	for _, g := range groups {
		if !st.Has(g.job) {
			continue
		}
		for _, v := range g.verbs {
			if _, ok := apiVerbs[g.name+" "+v.name]; ok {
				out = append(out, g.name+" "+v.name)
			}
		}
	}
	return out
}

// joinAnd joins words as a sentence lists them: "a, b and c".
func joinAnd(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

type principalKey struct{}

// WithPrincipal returns a copy of ctx naming who the audit records of the
// writes made with it name.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalOf returns who ctx names (WithPrincipal), or "".
func PrincipalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}
