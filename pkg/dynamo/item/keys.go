package item

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Key layout: docs/dynamodb.md lists every key, every item's attributes
// and costs. Every user-supplied component (namespace, entity, resource,
// limit name) goes through Esc,
// which leaves only [A-Za-z0-9._-] and writes every other byte as %XX, so
// no component can contain a separator (#, /) or forge the escape itself.
// A component whose escaped form exceeds maxComponent bytes is stored as
// "~" + hex(SHA-256(raw)): "~" never survives esc, so hashed and plain
// components cannot collide, keys stay short whatever the value (a bucket
// item keeps its raw entity and resource once, as attributes), and a bucket
// item stays within one write unit (1 KB) for entity and resource values up
// to 256 bytes each.
const (
	AttrPK = "PK"
	AttrSK = "SK"

	SKState   = "#STATE"
	SKMeta    = "#META"
	SKConfig  = "#CONFIG"
	SKVersion = "#VERSION"
	SKSettled = "#SETTLED"

	SystemNS = "_" // the table's own records; user namespaces start with "n"

	MaxComponent = 64
)

// Esc escapes one key component.
func Esc(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		const hexd = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	out := b.String()
	if len(out) > MaxComponent {
		sum := sha256.Sum256([]byte(s))
		return "~" + hex.EncodeToString(sum[:])
	}
	return out
}

// NSPart is the escaped namespace prefix. The empty namespace is "default".
// User namespaces are prefixed with "n" so that none can equal the system
// prefix "_".
func NSPart(ns string) string {
	if ns == "" {
		ns = "default"
	}
	return "n" + Esc(ns)
}

// BucketPK is the partition key of shard shard of the bucket of entity and
// resource in namespace ns (sort key SKState).
func BucketPK(ns, entity, resource string, shard int) string {
	return NSPart(ns) + "/BUCKET#" + Esc(entity) + "#" + Esc(resource) + "#" + strconv.Itoa(shard)
}

// LeasePK is the partition key of a settlement's marker (sort key
// skSettled): one item per settled ID in its namespace.
func LeasePK(ns, id string) string { return NSPart(ns) + "/LEASE#" + Esc(id) }

// EntityPK is the partition key of entity id's records in namespace ns: its
// metadata (SKMeta), its stored limits (EntityConfigSK, EntityDefaultSK)
// and its usage snapshots.
func EntityPK(ns, id string) string { return NSPart(ns) + "/ENTITY#" + Esc(id) }

// EntityConfigSK is the sort key of an entity's stored limits for one
// resource: "#CONFIG#" + the escaped resource.
func EntityConfigSK(resource string) string { return SKConfig + "#" + Esc(resource) }

// EntityDefaultSK is the entity's default config (all resources): "#CONFIG"
// alone, which no escaped resource can produce ("#CONFIG#" + esc(r) always
// Has the second '#').
const EntityDefaultSK = SKConfig

// ResourcePK is the partition key of a resource's stored limits in
// namespace ns (sort key SKConfig).
func ResourcePK(ns, resource string) string { return NSPart(ns) + "/RESOURCE#" + Esc(resource) }

// SystemPK is the partition key of namespace ns's own records: its
// system-wide stored limits (SKConfig) and its fleet's heartbeats.
func SystemPK(ns string) string { return NSPart(ns) + "/SYSTEM#" }

// AuditPK is the partition key of the audit trail of entity's stored
// limits in namespace ns.
func AuditPK(ns, entity string) string { return NSPart(ns) + "/AUDIT#" + Esc(entity) }

// AuditSK is the sort key of one audit entry, id a ULID so that entries
// sort by time.
func AuditSK(id string) string { return "#AUDIT#" + id }

// VersionPK and the namespace registry live under the system prefix.
const VersionPK = SystemNS + "/SYSTEM#"

// NamespaceSK is the sort key, under VersionPK, of the namespace
// registry's record of the namespace name.
func NamespaceSK(name string) string { return "#NAMESPACE#" + Esc(name) }

// NamespaceIDSK is the sort key, under VersionPK, of the registry's record
// reserving the namespace ID id.
func NamespaceIDSK(id string) string { return "#NSID#" + Esc(id) }

// Bucket attribute names (attrCascade and attrParent are an entity
// record's). Limit attributes are "b_" + esc(limit) + "_" + field.
const (
	AttrShardCount = "shard_count"
	AttrCascade    = "cascade"
	AttrParent     = "parent_id"
	AttrTTL        = "ttl"
	AttrEntity     = "entity"
	AttrResource   = "resource"
	AttrNamespace  = "ns"
	AttrEmpty      = "empty_start"
	AttrMerged     = "merged"  // a shard a merge removed (see image.gone)
	AttrPending    = "pending" // a shard a doubling created that holds nothing yet (see Image.Pending)
	AttrNonce      = "nonce"   // a settlement marker's: the Settle call that wrote it

	FieldLevel    = "x"  // the limit's level (tokenbucket.State), whole-bucket units
	FieldConsumed = "tc" // millitokens debited, for usage
	FieldShape    = "l"  // the limit the level was written with: "capacity/amount/period_ms"
)

// GSI1 (parent → children) is the one index: entity records carry its keys.
const (
	AttrGSI1PK = "GSI1PK"
	AttrGSI1SK = "GSI1SK"
)

// The clocks of a bucket item's last two writers (see the decision
// store's clock.go).
const (
	// AttrWriter is the writer's clock at a bucket write, unix ms, and
	// AttrPrevWriter the one the write replaced (the writer's own on the
	// item's first write). About 20 bytes of the item: its write units
	// are unchanged (see TestItemFitsOneWriteUnit).
	AttrWriter     = "wt"
	AttrPrevWriter = "wp"
)

// AttrRepaidPrefix begins the attribute in which a bucket item (shard 0)
// keeps, per replica, the stamp of the last repayment it applied from that
// replica: "rp_" + the replica's id (see cascade.Repayment). A write drops
// the stamps that no repayment can still be sent under.
const AttrRepaidPrefix = "rp_"

// RepaidAttr is the attribute that holds replica's last repayment stamp.
func RepaidAttr(replica string) string { return AttrRepaidPrefix + Esc(replica) }
