package dynamo

import (
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestJudgeCountsCompensationAlone: a give-back on an item of 4 shards
// (amounts already scaled) that shares a write with a consume counts
// what it gives back once, and leaves the consume's count as it is: the
// consumption counter moves by 3 − 2 tokens.
func TestJudgeCountsCompensationAlone(t *testing.T) {
	lim, err := tokenbucket.Rate(1000, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	key := cascade.Key{Entity: "e", Resource: "r"}
	b := bucket{key: key, ns: "default", base: "ndefault/e#r"}
	img := &item.Image{Exists: true, ShardCount: 4, Limits: map[string]item.LimitImage{}}
	now := time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC).UnixMilli()
	img.Limits[item.LimitPrefix("x")] = item.LimitImage{Level: lim.Full(now).X, Shape: lim}
	consume := &part{b: b, debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: 3 * tokenbucket.PerToken}}}
	giveBack := &part{kind: giveBackPart, b: b, scale: 4, debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: 4 * 2 * tokenbucket.PerToken, Op: cascade.Refund, Role: cascade.Advisory}}}
	j := judge([]*part{consume, giveBack}, img, now)
	if len(j.used) != 1 || j.used[0] != int64(tokenbucket.PerToken) {
		t.Errorf("judge(consume 3, give back 2 on 4 shards).used = %v, want [%d]", j.used, tokenbucket.PerToken)
	}
}
