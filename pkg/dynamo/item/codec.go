package item

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// LimitImage is one limit of a bucket item as stored.
type LimitImage struct {
	Level    tokenbucket.Int128 // x: the bucket's level (tokenbucket.State), in whole-bucket units
	Consumed int64              // tc: running total of millitokens debited (consumes and charges, less refunds)
	Shape    tokenbucket.Limit  // l: the limit the level was written with
}

// Image is a decoded bucket item. A nil *image or exists=false means the item
// does not exist.
type Image struct {
	Exists bool
	Empty  bool // shard created by doubling: absent limits start empty
	// EmptyMs is when the doubling created the shard (its clock), 0 when
	// the item does not say: absent limits start empty then, and have
	// refilled since.
	EmptyMs int64
	Merged  bool // a shard a merge removed: its shard count no longer counts it (see gone)
	// Pending says a doubling created the shard and has not yet moved
	// every old shard to the new count: it holds nothing, and decisions
	// go to its pair (the shard ShardCount/2 below it). PendingMs is when
	// the doubling created it (its clock).
	Pending    bool
	PendingMs  int64
	ShardCount int
	WroteMs    int64 // the clocks of its last two writers (attrWriter, attrPrevWriter), 0 when absent
	PrevMs     int64
	Limits     map[string]LimitImage // by attribute prefix ("b_"+esc(name))
	Repaid     map[string]int64      // per replica attribute (RepaidAttr), the stamp of its last repayment applied; nil when none
	AtMs       int64                 // when this replica got the image from DynamoDB (unix ms)
}

// RepaidStamp returns the stamp of the last repayment the item applied
// from replica, 0 when none (or the item does not exist).
func (im *Image) RepaidStamp(replica string) int64 {
	if im == nil || !im.Exists {
		return 0
	}
	return im.Repaid[RepaidAttr(replica)]
}

// LimitsOrNil returns the item's limits (nil when it does not exist).
func (im *Image) LimitsOrNil() map[string]LimitImage {
	if im == nil || !im.Exists {
		return nil
	}
	return im.Limits
}

// Has returns the limit stored under attribute prefix prefix, and whether
// the item exists and holds it.
func (im *Image) Has(prefix string) (LimitImage, bool) {
	if im == nil || !im.Exists {
		return LimitImage{}, false
	}
	l, ok := im.Limits[prefix]
	return l, ok
}

// Gone reports whether shard sh of a bucket is no longer one of its
// shards: a merge left the item behind with the new, smaller shard count
// (attrMerged), no levels and nothing to decide on. A write conditioned on
// the old count is refused, and its parts go to a shard that counts.
func (im *Image) Gone(sh int) bool {
	return im != nil && im.Exists && im.Merged && sh >= im.ShardCount
}

// Waiting reports whether shard sh of a bucket is a shard a doubling
// created that holds nothing yet (Pending), and returns the shard its
// decisions go to meanwhile: its pair, ShardCount/2 below it, which held
// its share before the doubling.
func (im *Image) Waiting(sh int) (pair int, ok bool) {
	if im == nil || !im.Exists || !im.Pending || im.Merged || sh < im.ShardCount/2 {
		return 0, false
	}
	return sh - im.ShardCount/2, true
}

// LimitPrefix is the attribute prefix of a limit: "b_"+esc(name).
func LimitPrefix(limit string) string { return "b_" + Esc(limit) }

// Decode decodes a bucket item. A level that is not a whole number
// within ±tokenbucket.MaxLevel was not written by this schema: the item is
// refused with ErrSchema rather than read as full.
func Decode(item map[string]types.AttributeValue) (*Image, error) {
	if len(item) == 0 {
		return &Image{}, nil
	}
	im := &Image{Exists: true, ShardCount: 1, Limits: map[string]LimitImage{}}
	for name, av := range item {
		switch {
		case name == AttrShardCount:
			if n, ok := Number(av); ok && n >= 1 {
				im.ShardCount = int(n)
			}
			continue
		case name == AttrEmpty:
			im.Empty = true
			if ms, ok := Number(av); ok {
				im.EmptyMs = ms
			}
			continue
		case name == AttrMerged:
			im.Merged = true
			continue
		case name == AttrPending:
			im.Pending = true
			im.PendingMs, _ = Number(av)
			continue
		case name == AttrWriter:
			im.WroteMs, _ = Number(av)
			continue
		case name == AttrPrevWriter:
			im.PrevMs, _ = Number(av)
			continue
		case strings.HasPrefix(name, AttrRepaidPrefix):
			if n, ok := Number(av); ok {
				if im.Repaid == nil {
					im.Repaid = map[string]int64{}
				}
				im.Repaid[name] = n
			}
			continue
		}
		prefix, field, ok := LimitField(name)
		if !ok {
			continue
		}
		l := im.Limits[prefix]
		if field == FieldShape {
			str, _ := av.(*types.AttributeValueMemberS)
			if str != nil {
				l.Shape = ParseShape(str.Value)
			}
			im.Limits[prefix] = l
			continue
		}
		n, _ := av.(*types.AttributeValueMemberN)
		if n == nil {
			return nil, fmt.Errorf("dynamo: bucket %s: attribute %s is not a number: %w", GetS(item, AttrPK), name, ErrSchema)
		}
		switch field {
		case FieldLevel:
			x, err := tokenbucket.ParseInt128(n.Value)
			if err != nil {
				return nil, fmt.Errorf("dynamo: bucket %s: attribute %s: %w: %w", GetS(item, AttrPK), name, ErrSchema, err)
			}
			l.Level = x
		case FieldConsumed:
			l.Consumed, _ = strconv.ParseInt(n.Value, 10, 64)
		}
		im.Limits[prefix] = l
	}
	for p := range im.Limits {
		if _, ok := item[p+"_"+FieldLevel]; !ok {
			delete(im.Limits, p) // a limit exists only with its level
		}
	}
	return im, nil
}

// LimitField splits a limit attribute "b_{name}_{field}".
func LimitField(name string) (prefix, field string, ok bool) {
	if !strings.HasPrefix(name, "b_") {
		return "", "", false
	}
	i := strings.LastIndexByte(name, '_')
	if i < 2 {
		return "", "", false
	}
	prefix, field = name[:i], name[i+1:]
	switch field {
	case FieldLevel, FieldConsumed, FieldShape:
		return prefix, field, true
	}
	return "", "", false
}

// ShapeAV encodes a limit as "capacity/amount/period_ms", followed for a
// calendar budget by "/" and its calendar ("day@America/New_York").
func ShapeAV(l tokenbucket.Limit) types.AttributeValue {
	s := strconv.FormatInt(int64(l.Capacity), 10) + "/" + strconv.FormatInt(int64(l.RefillAmount), 10) + "/" + strconv.FormatInt(l.RefillPeriod.Milliseconds(), 10)
	if !l.Calendar.IsZero() {
		s += "/" + l.Calendar.String()
	}
	return StrAV(s)
}

// ParseShape decodes shapeAV; anything else is the zero (invalid) Limit.
func ParseShape(s string) tokenbucket.Limit {
	parts := strings.SplitN(s, "/", 4) // a zone has slashes of its own
	var cal tokenbucket.Calendar
	if len(parts) == 4 {
		c, err := tokenbucket.ParseCalendar(parts[3])
		if err != nil {
			return tokenbucket.Limit{}
		}
		cal, parts = c, parts[:3]
	}
	if len(parts) != 3 {
		return tokenbucket.Limit{}
	}
	var v [3]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return tokenbucket.Limit{}
		}
		v[i] = n
	}
	l := tokenbucket.Limit{Capacity: tokenbucket.Millitokens(v[0]), RefillAmount: tokenbucket.Millitokens(v[1]), RefillPeriod: time.Duration(v[2]) * time.Millisecond, Calendar: cal}
	if l.Validate() != nil {
		return tokenbucket.Limit{}
	}
	return l
}

// Number decodes a number attribute as an int64, reporting false when av is
// not a number or does not fit.
func Number(av types.AttributeValue) (int64, bool) {
	n, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	return v, err == nil
}

// NumAV encodes v as a number attribute.
func NumAV(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// BigAV encodes v, a 128-bit number such as a level, as a number attribute.
func BigAV(v tokenbucket.Int128) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: v.String()}
}

// StrAV encodes s as a string attribute.
func StrAV(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// BoolAV encodes b as a boolean attribute.
func BoolAV(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

// Key is the primary key of the item with partition key pk and sort key
// sk, as GetItem, UpdateItem and DeleteItem take it.
func Key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: StrAV(pk), AttrSK: StrAV(sk)}
}

// GetS returns item's string attribute name, or "" when it is absent or
// not a string.
func GetS(item map[string]types.AttributeValue, name string) string {
	if s, ok := item[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// GetN returns item's number attribute name, or 0 when it is absent or not
// an int64.
func GetN(item map[string]types.AttributeValue, name string) int64 {
	n, _ := Number(item[name])
	return n
}

// GetBool returns item's boolean attribute name, or false when it is
// absent or not a boolean.
func GetBool(item map[string]types.AttributeValue, name string) bool {
	if b, ok := item[name].(*types.AttributeValueMemberBOOL); ok {
		return b.Value
	}
	return false
}

// ErrSchema reports that the table's schema version record is missing or
// unknown, or that an item holds what this schema cannot read.
var ErrSchema = errors.New("dynamo: schema version mismatch")
