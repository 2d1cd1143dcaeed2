package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// ErrNoSuchLimit is returned by TopUp for a limit the bucket does not
// hold.
var ErrNoSuchLimit = errors.New("dynamo: the bucket holds no limit of that name")

// TopUp credits amount millitokens to the limit named name of key's bucket
// now (for a calendar budget, within its current period), never above its
// capacity, and writes an audit record ("bucket.topup", with the
// principal) in the same TransactWriteItems. The credit is split over the
// bucket's shards as their tokens are, the remainder on shard 0. Each
// shard's level is lowered by an ADD, which commutes with every decision's
// write: a level credited past full is a full bucket, which the next write
// clamps, so nothing is lost to a race and no condition on the level is
// needed; only the shard count is checked (a doubling meanwhile: it reads
// again, up to 3 times). It returns the bucket as it was, and false with no
// write when the bucket has no item (a bucket without one is full).
// Cost: 2 write units per shard and 2 for the audit record, and a read
// unit per shard.
func (s *Store) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	if amount <= 0 || amount > tokenbucket.MaxMillitokens {
		return BucketState{}, false, fmt.Errorf("dynamo: a top-up is between 1 millitoken and %d", tokenbucket.MaxMillitokens)
	}
	return s.rewrite(ctx, key, limits, func(b bucketRef, imgs []*item.Image, before BucketState) error {
		if _, ok := before.Total()[name]; !ok {
			return fmt.Errorf("%w: %q", ErrNoSuchLimit, name)
		}
		return s.writeTopUp(ctx, b, imgs, name, amount, limits, before)
	})
}

// writeTopUp lowers the limit's level on every existing shard by its share
// of amount and writes the audit record, in one transaction.
func (s *Store) writeTopUp(ctx context.Context, b bucketRef, imgs []*item.Image, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit, before BucketState) error {
	n := len(imgs)
	prefix := item.LimitPrefix(name)
	var tx []types.TransactWriteItem
	for sh, img := range imgs {
		l, ok := shardLimits(img, limits)[prefix]
		if !img.Exists || !ok {
			continue
		}
		share := amount / tokenbucket.Millitokens(n)
		if sh == 0 {
			share += amount % tokenbucket.Millitokens(n)
		}
		if share == 0 {
			continue
		}
		// A shard's level is kept in whole-bucket units, of which the
		// shard holds 1/n: its share counts n times (as part.plan does).
		e := item.NewExpr()
		e.AddBig(prefix+"_"+item.FieldLevel, tokenbucket.Mul(int64(mulSat(share, n)), l.Limit.RefillPeriod.Milliseconds()).Neg())
		e.Condition("attribute_exists(" + e.Name(item.AttrPK) + ") AND " + e.Name(item.AttrShardCount) + " = " + e.Num(int64(n)))
		tx = append(tx, s.txUpdate(b.pk(sh), e))
	}
	sc := Scope{Namespace: b.ns, Entity: b.key.Entity, Resource: b.key.Resource}
	tx = append(tx, types.TransactWriteItem{Put: s.auditPut(b.ns, sc, "bucket.topup", bucketString(before), fmt.Sprintf("%s+%s", name, formatTokens(amount)))})
	return s.transact(ctx, "top up bucket", tx)
}

// mulSat returns a·n, saturating at tokenbucket.MaxMillitokens.
func mulSat(a tokenbucket.Millitokens, n int) tokenbucket.Millitokens {
	if n <= 1 || a <= 0 {
		return a
	}
	if a > tokenbucket.MaxMillitokens/tokenbucket.Millitokens(n) {
		return tokenbucket.MaxMillitokens
	}
	return a * tokenbucket.Millitokens(n)
}
