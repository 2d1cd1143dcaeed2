package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Status reads a bucket's limits without changing them. With several shards
// it reads one shard chosen at random and reports its share times the shard
// count. Limits absent from the table are full.
func (s *Store) Status(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (map[string]cascade.Status, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	b := s.bucketsOf(&cascade.Plan{Debits: []cascade.Debit{{Key: key}}})[0]
	// An operator's read, not a decision: the admin budget, not the
	// decision's (a cold table can take longer than BACKEND_TIMEOUT).
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	sh := s.pickShard(cacher{s}.shardCount(b.base))
	img, err := s.readBucket(cctx, b.pk(sh))
	if err == nil && img.Gone(sh) { // a merge removed it: shard 0 counts
		cacher{s}.learnImage(b.base, img)
		img, err = s.readBucket(cctx, b.pk(0))
	}
	if err != nil {
		return nil, err
	}
	cacher{s}.learnImage(b.base, img)
	now := s.nowMs()
	res := make(map[string]cascade.Status, len(limits))
	for name, l := range limits {
		lv, _ := startLevel(img, item.LimitPrefix(name), l, now)
		st := lv.State()
		res[name] = cascade.Status{
			OK:         l.Check(&lv, now),
			Remaining:  l.Tokens(st, now),
			RetryAfter: l.RetryAfter(st, 1, now),
			ResetAfter: l.TimeToFull(st, now),
			Bucket:     l,
		}
	}
	return res, nil
}

// SetShards pre-shards a bucket that does not exist yet into n shards (a
// power of two up to MaxShards), each created full with its share of every
// limit. Meant for known hot buckets and tests.
func (s *Store) SetShards(ctx context.Context, key cascade.Key, n int, limits map[string]tokenbucket.Limit) error {
	if n < 1 || n > MaxShards || n&(n-1) != 0 {
		return fmt.Errorf("dynamo: shards: %d is not a power of two between 1 and %d", n, MaxShards)
	}
	b := s.bucketsOf(&cascade.Plan{Debits: []cascade.Debit{{Key: key}}})[0]
	now := s.nowMs()
	tx := make([]types.TransactWriteItem, n)
	for sh := 0; sh < n; sh++ {
		e := item.NewExpr()
		s.setMeta(e, b, n)
		fullAt := now/1000 + int64(minBucketTTL.Seconds())
		for name, l := range limits {
			p := item.LimitPrefix(name)
			e.SetAttr(p+"_"+item.FieldLevel, item.BigAV(l.Full(now).X))
			e.SetAttr(p+"_"+item.FieldConsumed, item.NumAV(0))
			setShape(e, p, l)
		}
		e.SetAttr(item.AttrTTL, item.NumAV(fullAt))
		e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ")")
		tx[sh] = s.txUpdate(b.pk(sh), e)
	}
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	if _, err := s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx}); err != nil {
		return Classify("pre-shard bucket", err)
	}
	cacher{s}.learnShards(b.base, n)
	return nil
}
