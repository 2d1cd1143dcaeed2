package dynamo

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// limitImage is one limit of a bucket item as stored.
type limitImage struct {
	Tokens     int64 // tk: millitokens after the last refill (may be negative)
	LastRefill int64 // lr: unix ms up to which refill was credited
	Capacity   int64 // cp, ra, rp: the shape last written (informational)
	Amount     int64
	PeriodMs   int64
	Consumed   int64 // tc: running total of millitokens consumed
}

// image is a decoded bucket item. A nil *image or exists=false means the item
// does not exist.
type image struct {
	exists     bool
	empty      bool // shard created by doubling: absent limits start empty
	shardCount int
	rf         int64
	limits     map[string]limitImage // by attribute prefix ("b_"+esc(name), or "wcu")
}

func (im *image) has(prefix string) (limitImage, bool) {
	if im == nil || !im.exists {
		return limitImage{}, false
	}
	l, ok := im.limits[prefix]
	return l, ok
}

func (l limitImage) state() tokenbucket.State {
	return tokenbucket.State{Tokens: tokenbucket.Millitokens(l.Tokens), LastRefill: l.LastRefill}
}

// limitPrefix is the attribute prefix of a limit: "b_"+esc(name), or "wcu".
func limitPrefix(limit string) string {
	if limit == wcuLimit {
		return "wcu"
	}
	return "b_" + esc(limit)
}

// wcuShape is the hidden per-item write-capacity limit: 1000 writes per
// second, one token per write.
// It holds 10 s of writes, as DynamoDB partitions bank unused capacity for
// bursts: shards double under sustained load, not under a short burst.
var wcuShape = tokenbucket.Limit{Capacity: 10000 * tokenbucket.PerToken, RefillAmount: 1000 * tokenbucket.PerToken, RefillPeriod: time.Second}

// wcuCost is what one write takes from wcu.
const wcuCost = tokenbucket.PerToken

func decodeImage(item map[string]types.AttributeValue) *image {
	if len(item) == 0 {
		return &image{}
	}
	im := &image{exists: true, shardCount: 1, limits: map[string]limitImage{}}
	for name, av := range item {
		n, ok := number(av)
		switch {
		case name == attrShardCount:
			if ok && n >= 1 {
				im.shardCount = int(n)
			}
			continue
		case name == attrEmpty:
			im.empty = true
			continue
		case name == attrRF:
			im.rf = n
			continue
		case !ok:
			continue
		case strings.HasPrefix(name, "b_") || strings.HasPrefix(name, "wcu_"):
		default:
			continue
		}
		i := strings.LastIndexByte(name, '_')
		prefix, field := name[:i], name[i+1:]
		l := im.limits[prefix]
		switch field {
		case fieldTokens:
			l.Tokens = n
		case fieldRefilled:
			l.LastRefill = n
		case fieldCapacity:
			l.Capacity = n
		case fieldAmount:
			l.Amount = n
		case fieldPeriod:
			l.PeriodMs = n
		case fieldConsumed:
			l.Consumed = n
		default:
			continue
		}
		im.limits[prefix] = l
	}
	// A limit exists only with its token count.
	for p, l := range im.limits {
		if _, ok := item[p+"_"+fieldTokens]; !ok {
			delete(im.limits, p)
		} else {
			im.limits[p] = l
		}
	}
	return im
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
