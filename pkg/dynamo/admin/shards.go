package admin

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Status reads a bucket's limits without changing them. With several shards
// it reads one shard chosen at random and reports its share times the shard
// count. Limits absent from the table are full. The shard counts it reads
// are the decision store's to learn (dynamo.Store.LearnBucket).
func (s *Store) Status(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (map[string]cascade.Status, error) {
	if err := s.st.CheckOpen(); err != nil {
		return nil, err
	}
	b := bucketRef{key: key, ns: s.t.NsOr(key.Namespace)}
	// An operator's read, not a decision: the admin budget, not the
	// decision's (a cold table can take longer than BACKEND_TIMEOUT).
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	sh := s.st.PickShard(key)
	img, err := s.readBucket(cctx, b.pk(sh))
	if err == nil && img.Gone(sh) { // a merge removed it: shard 0 counts
		s.st.LearnBucket(key, img)
		img, err = s.readBucket(cctx, b.pk(0))
	}
	if pair, waiting := img.Waiting(sh); err == nil && waiting { // a doubling's, holding nothing yet: its pair holds its share
		s.st.LearnBucket(key, img)
		img, err = s.readBucket(cctx, b.pk(pair))
	}
	if err != nil {
		return nil, err
	}
	s.st.LearnBucket(key, img)
	now := s.t.Now().UnixMilli()
	res := make(map[string]cascade.Status, len(limits))
	for name, l := range limits {
		lv, _ := dynamo.StartLevel(img, item.LimitPrefix(name), l, now)
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
// power of two up to dynamo.MaxShards), each created full with its share
// of every limit, in one TransactWriteItems, and has the decision store
// learn the count. Meant for known hot buckets and tests.
func (s *Store) SetShards(ctx context.Context, key cascade.Key, n int, limits map[string]tokenbucket.Limit) error {
	if n < 1 || n > dynamo.MaxShards || n&(n-1) != 0 {
		return fmt.Errorf("dynamo: shards: %d is not a power of two between 1 and %d", n, dynamo.MaxShards)
	}
	b := bucketRef{key: key, ns: s.t.NsOr(key.Namespace)}
	now := s.t.Now().UnixMilli()
	tx := make([]types.TransactWriteItem, n)
	for sh := 0; sh < n; sh++ {
		e := item.NewExpr()
		e.SetAttr(item.AttrNamespace, item.StrAV(b.ns))
		e.SetAttr(item.AttrEntity, item.StrAV(key.Entity))
		e.SetAttr(item.AttrResource, item.StrAV(key.Resource))
		e.SetAttr(item.AttrShardCount, item.NumAV(int64(n)))
		fullAt := now/1000 + int64(dynamo.MinBucketTTL.Seconds())
		for name, l := range limits {
			p := item.LimitPrefix(name)
			e.SetAttr(p+"_"+item.FieldLevel, item.BigAV(l.Full(now).X))
			e.SetAttr(p+"_"+item.FieldConsumed, item.NumAV(0))
			e.SetAttr(p+"_"+item.FieldShape, item.ShapeAV(l))
		}
		e.SetAttr(item.AttrTTL, item.NumAV(fullAt))
		e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ")")
		tx[sh] = s.txUpdate(b.pk(sh), e)
	}
	if err := s.transact(ctx, "pre-shard bucket", tx); err != nil {
		return err
	}
	s.st.LearnBucket(key, &item.Image{Exists: true, ShardCount: n})
	return nil
}
