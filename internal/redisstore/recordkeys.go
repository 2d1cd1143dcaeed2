package redisstore

import (
	"strings"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// The keys of the records an operator writes: entity records, the sets of
// their children, limits stored at a scope and audit trails. Each is in
// the slot of the entity it concerns (the hash tag of its buckets), so
// that an entity's records and its buckets share a node; a scope without
// an entity has a tag of its own.

// entityTag is the hash tag of entity id's records in namespace ns: its
// buckets'.
func (ks keyspace) entityTag(ns, id string) string {
	return ks.tag(cascade.Key{Namespace: ns, Entity: id})
}

// record is the key of a record of kind c ('e' entity, 'c' children, 'l'
// limits of an entity and a resource, 'L' an entity's default limits, 'a'
// an audit trail) in namespace ns, in the slot of tag, named by parts.
func (ks keyspace) record(ns, tag string, c byte, parts ...string) string {
	var b strings.Builder
	ks.head(&b, ns, tag)
	b.WriteByte(c)
	for _, p := range parts {
		keyPart(&b, p)
	}
	return b.String()
}

// entity is the key of entity id's record: a hash of its parent, its
// cascade flag and when it was created.
func (ks keyspace) entity(ns, id string) string {
	return ks.record(ns, ks.entityTag(ns, id), 'e', id)
}

// children is the key of the set of the ids whose parent is id.
func (ks keyspace) children(ns, id string) string {
	return ks.record(ns, ks.entityTag(ns, id), 'c', id)
}

// scopeTag is the hash tag of the records of a scope without an entity:
// one per resource, one for the system.
func (ks keyspace) scopeTag(ns string, sc Scope) string {
	if sc.System {
		return ks.tag(cascade.Key{Namespace: ns, Entity: "\x00system"})
	}
	return ks.tag(cascade.Key{Namespace: ns, Entity: "\x00resource", Resource: sc.Resource})
}

// limits is the key of the hash of the limits stored at sc in namespace
// ns: per limit name, its shape.
func (ks keyspace) limits(ns string, sc Scope) string {
	switch {
	case sc.Entity != "" && sc.Resource != "":
		return ks.record(ns, ks.entityTag(ns, sc.Entity), 'l', sc.Entity, sc.Resource)
	case sc.Entity != "":
		return ks.record(ns, ks.entityTag(ns, sc.Entity), 'L', sc.Entity)
	case sc.System:
		return ks.record(ns, ks.scopeTag(ns, sc), 'S')
	}
	return ks.record(ns, ks.scopeTag(ns, sc), 'R', sc.Resource)
}

// audit is the key of the audit trail that records the changes of sc:
// its entity's (every resource of it), else its resource's or the
// system's. A list, newest first.
func (ks keyspace) audit(ns string, sc Scope) string {
	switch {
	case sc.Entity != "":
		return ks.record(ns, ks.entityTag(ns, sc.Entity), 'a', sc.Entity)
	case sc.System:
		return ks.record(ns, ks.scopeTag(ns, sc), 'a', "\x00system")
	}
	return ks.record(ns, ks.scopeTag(ns, sc), 'a', "\x00resource", sc.Resource)
}
