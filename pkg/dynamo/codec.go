package dynamo

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// limitImage is one limit of a bucket item as stored.
type limitImage struct {
	Level    tokenbucket.Int128 // x: the bucket's level (tokenbucket.State), in whole-bucket units
	Consumed int64              // tc: running total of millitokens debited (consumes and charges, less refunds)
	Shape    tokenbucket.Limit  // l: the limit the level was written with
}

// image is a decoded bucket item. A nil *image or exists=false means the item
// does not exist.
type image struct {
	exists     bool
	empty      bool // shard created by doubling: absent limits start empty
	merged     bool // a shard a merge removed: its shard count no longer counts it (see gone)
	shardCount int
	wroteMs    int64 // the clocks of its last two writers (attrWriter, attrPrevWriter), 0 when absent
	prevMs     int64
	limits     map[string]limitImage // by attribute prefix ("b_"+esc(name))
	atMs       int64                 // when this replica got the image from DynamoDB (unix ms)
}

// limitsOrNil returns the item's limits (nil when it does not exist).
func (im *image) limitsOrNil() map[string]limitImage {
	if im == nil || !im.exists {
		return nil
	}
	return im.limits
}

func (im *image) has(prefix string) (limitImage, bool) {
	if im == nil || !im.exists {
		return limitImage{}, false
	}
	l, ok := im.limits[prefix]
	return l, ok
}

// gone reports whether shard sh of a bucket is no longer one of its
// shards: a merge left the item behind with the new, smaller shard count
// (attrMerged), no levels and nothing to decide on. A write conditioned on
// the old count is refused, and its parts go to a shard that counts.
func (im *image) gone(sh int) bool {
	return im != nil && im.exists && im.merged && sh >= im.shardCount
}

// limitPrefix is the attribute prefix of a limit: "b_"+esc(name).
func limitPrefix(limit string) string { return "b_" + esc(limit) }

// decodeImage decodes a bucket item. A level that is not a whole number
// within ±tokenbucket.MaxLevel was not written by this schema: the item is
// refused with ErrSchema rather than read as full.
func decodeImage(item map[string]types.AttributeValue) (*image, error) {
	if len(item) == 0 {
		return &image{}, nil
	}
	im := &image{exists: true, shardCount: 1, limits: map[string]limitImage{}}
	for name, av := range item {
		switch {
		case name == attrShardCount:
			if n, ok := number(av); ok && n >= 1 {
				im.shardCount = int(n)
			}
			continue
		case name == attrEmpty:
			im.empty = true
			continue
		case name == attrMerged:
			im.merged = true
			continue
		case name == attrWriter:
			im.wroteMs, _ = number(av)
			continue
		case name == attrPrevWriter:
			im.prevMs, _ = number(av)
			continue
		}
		prefix, field, ok := limitField(name)
		if !ok {
			continue
		}
		l := im.limits[prefix]
		if field == fieldShape {
			str, _ := av.(*types.AttributeValueMemberS)
			if str != nil {
				l.Shape = parseShape(str.Value)
			}
			im.limits[prefix] = l
			continue
		}
		n, _ := av.(*types.AttributeValueMemberN)
		if n == nil {
			return nil, fmt.Errorf("dynamo: bucket %s: attribute %s is not a number: %w", getS(item, attrPK), name, ErrSchema)
		}
		switch field {
		case fieldLevel:
			x, err := tokenbucket.ParseInt128(n.Value)
			if err != nil {
				return nil, fmt.Errorf("dynamo: bucket %s: attribute %s: %w: %w", getS(item, attrPK), name, ErrSchema, err)
			}
			l.Level = x
		case fieldConsumed:
			l.Consumed, _ = strconv.ParseInt(n.Value, 10, 64)
		}
		im.limits[prefix] = l
	}
	for p := range im.limits {
		if _, ok := item[p+"_"+fieldLevel]; !ok {
			delete(im.limits, p) // a limit exists only with its level
		}
	}
	return im, nil
}

// limitField splits a limit attribute "b_{name}_{field}".
func limitField(name string) (prefix, field string, ok bool) {
	if !strings.HasPrefix(name, "b_") {
		return "", "", false
	}
	i := strings.LastIndexByte(name, '_')
	if i < 2 {
		return "", "", false
	}
	prefix, field = name[:i], name[i+1:]
	switch field {
	case fieldLevel, fieldConsumed, fieldShape:
		return prefix, field, true
	}
	return "", "", false
}

// shapeAV encodes a limit as "capacity/amount/period_ms", followed for a
// calendar budget by "/" and its calendar ("day@America/New_York").
func shapeAV(l tokenbucket.Limit) types.AttributeValue {
	s := strconv.FormatInt(int64(l.Capacity), 10) + "/" + strconv.FormatInt(int64(l.RefillAmount), 10) + "/" + strconv.FormatInt(l.RefillPeriod.Milliseconds(), 10)
	if !l.Calendar.IsZero() {
		s += "/" + l.Calendar.String()
	}
	return strAV(s)
}

// parseShape decodes shapeAV; anything else is the zero (invalid) Limit.
func parseShape(s string) tokenbucket.Limit {
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

func number(av types.AttributeValue) (int64, bool) {
	n, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	return v, err == nil
}

func numAV(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func bigAV(v tokenbucket.Int128) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: v.String()}
}

func strAV(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func boolAV(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

func itemKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: strAV(pk), attrSK: strAV(sk)}
}

func getS(item map[string]types.AttributeValue, name string) string {
	if s, ok := item[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func getN(item map[string]types.AttributeValue, name string) int64 {
	n, _ := number(item[name])
	return n
}

func getBool(item map[string]types.AttributeValue, name string) bool {
	if b, ok := item[name].(*types.AttributeValueMemberBOOL); ok {
		return b.Value
	}
	return false
}
