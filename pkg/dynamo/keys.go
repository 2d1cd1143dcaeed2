package dynamo

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Key layout: the package documentation (doc.go) lists every key, and
// docs/dynamodb.md every item's attributes and costs. Every user-supplied
// component (namespace, entity, resource, limit name) goes through esc,
// which leaves only [A-Za-z0-9._-] and writes every other byte as %XX, so
// no component can contain a separator (#, /) or forge the escape itself.
// A component whose escaped form exceeds maxComponent bytes is stored as
// "~" + hex(SHA-256(raw)): "~" never survives esc, so hashed and plain
// components cannot collide, keys stay short whatever the value (a bucket
// item keeps its raw entity and resource once, as attributes), and a bucket
// item stays within one write unit (1 KB) for entity and resource values up
// to 256 bytes each.
const (
	attrPK = "PK"
	attrSK = "SK"

	skState   = "#STATE"
	skMeta    = "#META"
	skConfig  = "#CONFIG"
	skVersion = "#VERSION"
	skSettled = "#SETTLED"

	systemNS = "_" // the table's own records; user namespaces start with "n"

	maxComponent = 64
)

// esc escapes one key component.
func esc(s string) string {
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
	if len(out) > maxComponent {
		sum := sha256.Sum256([]byte(s))
		return "~" + hex.EncodeToString(sum[:])
	}
	return out
}

// nsPart is the escaped namespace prefix. The empty namespace is "default".
// User namespaces are prefixed with "n" so that none can equal the system
// prefix "_".
func nsPart(ns string) string {
	if ns == "" {
		ns = "default"
	}
	return "n" + esc(ns)
}

func bucketPK(ns, entity, resource string, shard int) string {
	return nsPart(ns) + "/BUCKET#" + esc(entity) + "#" + esc(resource) + "#" + strconv.Itoa(shard)
}

// leasePK is the partition key of a settlement's marker (sort key
// skSettled): one item per settled ID in its namespace.
func leasePK(ns, id string) string { return nsPart(ns) + "/LEASE#" + esc(id) }

func entityPK(ns, id string) string { return nsPart(ns) + "/ENTITY#" + esc(id) }

func entityConfigSK(resource string) string { return skConfig + "#" + esc(resource) }

// entityDefaultSK is the entity's default config (all resources): "#CONFIG"
// alone, which no escaped resource can produce ("#CONFIG#" + esc(r) always
// has the second '#').
const entityDefaultSK = skConfig

func resourcePK(ns, resource string) string { return nsPart(ns) + "/RESOURCE#" + esc(resource) }

func systemPK(ns string) string { return nsPart(ns) + "/SYSTEM#" }

func auditPK(ns, entity string) string { return nsPart(ns) + "/AUDIT#" + esc(entity) }

func auditSK(id string) string { return "#AUDIT#" + id }

// versionPK and the namespace registry live under the system prefix.
const versionPK = systemNS + "/SYSTEM#"

func namespaceSK(name string) string { return "#NAMESPACE#" + esc(name) }

func namespaceIDSK(id string) string { return "#NSID#" + esc(id) }

// Bucket attribute names (attrCascade and attrParent are an entity
// record's). Limit attributes are "b_" + esc(limit) + "_" + field.
const (
	attrShardCount = "shard_count"
	attrCascade    = "cascade"
	attrParent     = "parent_id"
	attrTTL        = "ttl"
	attrEntity     = "entity"
	attrResource   = "resource"
	attrNamespace  = "ns"
	attrEmpty      = "empty_start"
	attrMerged     = "merged" // a shard a merge removed (see image.gone)
	attrNonce      = "nonce"  // a settlement marker's: the Settle call that wrote it

	fieldLevel    = "x"  // the limit's level (tokenbucket.State), whole-bucket units
	fieldConsumed = "tc" // millitokens debited, for usage
	fieldShape    = "l"  // the limit the level was written with: "capacity/amount/period_ms"
)

// GSI1 (parent → children) is the one index: entity records carry its keys.
const (
	attrGSI1PK = "GSI1PK"
	attrGSI1SK = "GSI1SK"
)
