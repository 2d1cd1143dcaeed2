package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Prefix starts every key the store writes.
const Prefix = "dl:"

// keyspace names the store's keys in Redis. Every key starts with Prefix
// and the namespace; a bucket's key then carries its hash tag (its
// cluster slot: a hash of its namespace and entity alone, so that an item
// is one key whatever request, settlement or command names it) and its
// entity and resource. Each part is escaped ({, } and % as %7B, %7D, %25:
// the tag is a key's only braces) and length-prefixed, so that no value
// can end one part and start the next: two keys are equal only when every
// part is.
type keyspace struct {
	ns string // the deployment's namespace, for keys that name none
}

// keyPart appends s to b escaped and length-prefixed: "<len>:<escaped>".
func keyPart(b *strings.Builder, s string) {
	n := len(s) + 2*strings.Count(s, "{") + 2*strings.Count(s, "}") + 2*strings.Count(s, "%")
	b.WriteString(strconv.Itoa(n))
	b.WriteByte(':')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c)
		}
	}
}

// namespace is k's namespace, the deployment's when k names none.
func (ks keyspace) namespace(k cascade.Key) string {
	if k.Namespace != "" {
		return k.Namespace
	}
	return ks.ns
}

// tag is the hash tag of k's keys: 16 hex digits of a hash of its
// namespace and entity (hex holds no brace), so that an entity's buckets
// of every resource, its usage and its resource index share a slot.
func (ks keyspace) tag(k cascade.Key) string {
	h := sha256.New()
	var b strings.Builder
	keyPart(&b, ks.namespace(k))
	keyPart(&b, k.Entity)
	h.Write([]byte(b.String()))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// writeNamespace writes the start of every key of namespace ns: the
// prefix and the namespace (NamespacePrefix).
func writeNamespace(b *strings.Builder, ns string) {
	b.WriteString(Prefix)
	keyPart(b, ns)
}

// head is a key's start: the prefix, the namespace and the tag.
func (ks keyspace) head(b *strings.Builder, ns, tag string) {
	writeNamespace(b, ns)
	b.WriteByte('{')
	b.WriteString(tag)
	b.WriteByte('}')
}

// bucket is the key of k's bucket hash.
func (ks keyspace) bucket(k cascade.Key) string { return ks.bucketIn(k, "") }

// settled is the key that records settlement id as applied to the items
// in the slot of tag, in namespace ns.
func (ks keyspace) settled(ns, tag, id string) string {
	var b strings.Builder
	ks.head(&b, ns, tag)
	b.WriteByte('s')
	keyPart(&b, id)
	return b.String()
}

// fleet is the key of the namespace's replica heartbeats.
func (ks keyspace) fleet() string {
	var b strings.Builder
	writeNamespace(&b, ks.ns)
	b.WriteString("fleet")
	return b.String()
}

// itemKeys are the keys of one bucket item: its hash, the start of its
// usage keys, and its entity's resource set, all under one hash tag.
type itemKeys struct {
	bucket, usage, resources string
}

// itemIn returns k's keys under tag ("" for its entity's own). The three
// are cut from one string, built once: one allocation.
func (ks keyspace) itemIn(k cascade.Key, tag string) itemKeys {
	if tag == "" {
		tag = ks.tag(k)
	}
	ns := ks.namespace(k)
	var b strings.Builder
	b.Grow(3*(len(ns)+len(tag)+len(k.Entity)) + 2*len(k.Resource) + 64)
	var ends [3]int
	for i, kind := range [3]byte{'b', 'u', 'r'} {
		ks.itemKey(&b, kind, k, ns, tag)
		ends[i] = b.Len()
	}
	all := b.String()
	return itemKeys{bucket: all[:ends[0]], usage: all[ends[0]:ends[1]], resources: all[ends[1]:]}
}

// bucketIn is itemIn(k, tag).bucket alone: what a decision's lane is
// named by, made without the other two.
func (ks keyspace) bucketIn(k cascade.Key, tag string) string {
	if tag == "" {
		tag = ks.tag(k)
	}
	var b strings.Builder
	ks.itemKey(&b, 'b', k, ks.namespace(k), tag)
	return b.String()
}

// itemKey writes k's key of kind: 'b' its bucket hash, 'u' the start of
// its usage keys, 'r' its entity's resource set.
func (ks keyspace) itemKey(b *strings.Builder, kind byte, k cascade.Key, ns, tag string) {
	ks.head(b, ns, tag)
	b.WriteByte(kind)
	keyPart(b, k.Entity)
	if kind != 'r' {
		keyPart(b, k.Resource)
	}
}

// usageKey is the key of the usage hash of an item (its itemKeys.usage)
// in the window of kind w ('h', 'd', 'm') starting at startMs: per limit,
// the millitokens consumed.
func usageKey(usage string, w byte, startMs int64) string {
	return usage + string(w) + strconv.FormatInt(startMs, 10)
}

// BucketKey is the Redis key of k's bucket hash in a deployment of
// namespace ns (NAMESPACE): what an operator looks up with redis-cli. On a
// cluster the key of an entity below a chain root is the root's
// (ChainBucketKey).
func BucketKey(ns string, k cascade.Key) string { return keyspace{ns: ns}.bucket(k) }

// ChainBucketKey is the Redis key of k's bucket hash on a cluster when its
// entity's chain has root (the root entity's name, with k's branch after
// '#'): the hash tag is the root's.
func ChainBucketKey(ns string, k cascade.Key, root string) string {
	ks := keyspace{ns: ns}
	r := k
	r.Entity = root
	return ks.bucketIn(k, ks.tag(r))
}

// registryKey is the hash of the namespace registry (namespaces.go). Past
// Prefix it has no length prefix: every key of a namespace has one (a
// digit follows Prefix), so no namespace's key can be it.
const registryKey = Prefix + "namespaces"

// NamespacePrefix is the start of every key of namespace ns: Prefix and
// its length-prefixed name, which ends where it says (another namespace's
// keys never start with it). What an operator SCANs for with redis-cli.
func NamespacePrefix(ns string) string {
	var b strings.Builder
	writeNamespace(&b, ns)
	return b.String()
}

// unescapePart undoes keyPart's escapes.
var unescapePart = strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")

// namespaceOfKey is the namespace whose keys key starts with (keyPart
// undone); false when it starts with no namespace's prefix (the
// registry's key, another program's key).
func namespaceOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return "", false
	}
	digits, rest, ok := strings.Cut(rest, ":")
	n, err := strconv.Atoi(digits)
	if !ok || err != nil || n < 0 || n > len(rest) || strconv.Itoa(n) != digits {
		return "", false
	}
	escaped := rest[:n]
	name := unescapePart.Replace(escaped)
	if NamespacePrefix(name) != key[:len(Prefix)+len(digits)+1+n] {
		return "", false // not as keyPart writes it
	}
	return name, true
}
