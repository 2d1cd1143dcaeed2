package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// updateFor builds the conditional update of write w on item it.
func (s *Store) updateFor(it *item, w *write, now int64) *expr {
	e := newExpr()
	if w.exists {
		e.condition(e.name(attrShardCount) + " = " + e.num(int64(it.n)))
	} else {
		e.condition("attribute_not_exists(" + e.name(attrPK) + ")")
		s.setMeta(e, it, it.shard, it.n)
	}
	for i := range w.limits {
		writeLimit(e, &w.limits[i], w.exists)
	}
	if w.refill || !w.exists {
		e.setAttr(attrRF, numAV(now))
	}
	e.setAttr(attrTTL, numAV(now/1000+int64(bucketTTL.Seconds())))
	return e
}

// setMeta writes the descriptive attributes of a new bucket item.
func (s *Store) setMeta(e *expr, it *item, shard, n int) {
	e.setAttr(attrNamespace, strAV(it.ns))
	e.setAttr(attrEntity, strAV(it.key.Entity))
	e.setAttr(attrResource, strAV(it.key.Resource))
	e.setAttr(attrShard, numAV(int64(shard)))
	e.setAttr(attrShardCount, numAV(int64(n)))
	e.setAttr(attrGSI2PK, strAV(nsPart(it.ns)+"/RESOURCE#"+esc(it.key.Resource)))
	e.setAttr(attrGSI2SK, strAV("BUCKET#"+esc(it.key.Entity)+"#"+strconv.Itoa(shard)))
	e.setAttr(attrGSI3PK, strAV(entityPK(it.ns, it.key.Entity)))
	e.setAttr(attrGSI3SK, strAV("#BUCKET#"+esc(it.key.Resource)+"#"+strconv.Itoa(shard)))
	e.setAttr(attrGSI4PK, strAV(nsPart(it.ns)))
	e.setAttr(attrGSI4SK, strAV(bucketPK(it.ns, it.key.Entity, it.key.Resource, shard)))
	if ent, ok := s.cachedEntityRecord(it.ns, it.key.Entity); ok {
		if ent.Parent != "" {
			e.setAttr(attrParent, strAV(ent.Parent))
		}
		e.setAttr(attrCascade, boolAV(ent.Cascade))
	}
}

func (s *Store) updateInput(it *item, e *expr) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.cfg.Table),
		Key:                                 itemKey(it.pk, skState),
		UpdateExpression:                    e.update(),
		ConditionExpression:                 e.conditionExpr(),
		ExpressionAttributeNames:            e.attrNames(),
		ExpressionAttributeValues:           e.attrValues(),
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityTotal,
	}
}

// update sends one conditional update. On a failed condition it returns
// the item's old image and ok false.
func (s *Store) update(ctx context.Context, in *dynamodb.UpdateItemInput) (newImg *image, ok bool, err error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	out, err := s.api.UpdateItem(cctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return decodeImage(ccf.Item), false, nil
		}
		return nil, false, classify("update "+aws.ToString(in.TableName), err)
	}
	return decodeImage(out.Attributes), true, nil
}

// writeOne sends the single write of a decision and, when it lands, decides
// again on the states the item actually held (from ALL_NEW) for exact
// statuses.
func (s *Store) writeOne(ctx context.Context, q *cascade.Plan, idx []int, slots []slot, items []*item, w write, now int64) (cascade.Decision, bool, error) {
	it := items[w.item]
	newImg, ok, err := s.update(ctx, s.updateInput(it, s.updateFor(it, &w, now)))
	if err != nil {
		return cascade.Decision{}, false, err
	}
	if !ok {
		s.setImage(it, newImg, true)
		return cascade.Decision{}, false, nil
	}
	dec := cascade.Decide(q, idx, actualPre(q, idx, slots, items, []write{w}, []*image{newImg}, now), now)
	s.setImage(it, newImg, true)
	return dec, true, nil
}

// actualPre returns the states the items held just before writes ws landed,
// from the images the writes returned (ALL_NEW): a relative limit held
// tk − delta, and a limit whose last refill the write did not move kept the
// one now stored.
func actualPre(q *cascade.Plan, idx []int, slots []slot, items []*item, ws []write, newImgs []*image, now int64) []tokenbucket.State {
	pre := states(q, idx, slots, items, now)
	for wi, w := range ws {
		for j, sl := range slots {
			if sl.item != w.item {
				continue
			}
			for _, lw := range w.limits {
				if lw.prefix != sl.prefix || !lw.present {
					continue
				}
				l, ok := newImgs[wi].has(lw.prefix)
				if !ok {
					continue
				}
				if !lw.s.fixed {
					pre[j].Tokens = tokenbucket.Millitokens(l.Tokens - lw.s.off)
				}
				if lw.s.last == lw.img.LastRefill {
					pre[j].LastRefill = l.LastRefill
				}
			}
		}
	}
	return pre
}

// writeParallel sends the writes of a multi-item decision at once. If any
// condition fails, the writes that landed are compensated (their debits
// added back) and it reports false; the caller retries transactionally.
func (s *Store) writeParallel(ctx context.Context, q *cascade.Plan, idx []int, slots []slot, items []*item, ws []write, now int64) (cascade.Decision, bool, error) {
	type result struct {
		img *image
		ok  bool
		err error
	}
	res := make([]result, len(ws))
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			it := items[ws[i].item]
			img, ok, err := s.update(ctx, s.updateInput(it, s.updateFor(it, &ws[i], now)))
			res[i] = result{img, ok, err}
		}(i)
	}
	wg.Wait()
	all := true
	var firstErr error
	for i := range res {
		if res[i].err != nil && firstErr == nil {
			firstErr = res[i].err
		}
		all = all && res[i].ok
	}
	if all {
		imgs := make([]*image, len(ws))
		for i := range ws {
			imgs[i] = res[i].img
		}
		dec := cascade.Decide(q, idx, actualPre(q, idx, slots, items, ws, imgs, now), now)
		for i := range ws {
			s.setImage(items[ws[i].item], res[i].img, true)
		}
		return dec, true, nil
	}
	// Compensate the writes that landed.
	for i := range ws {
		it := items[ws[i].item]
		switch {
		case res[i].ok:
			if err := s.compensate(ctx, it, &ws[i]); err != nil {
				return cascade.Decision{}, false, err
			}
			s.setImage(it, nil, false)
		case res[i].err == nil:
			s.setImage(it, res[i].img, true)
		}
	}
	return cascade.Decision{}, false, firstErr
}

// compensate adds back what write w debited (unconditional ADD; refill it
// credited stays, as it would have happened anyway).
func (s *Store) compensate(ctx context.Context, it *item, w *write) error {
	e := newExpr()
	for _, lw := range w.limits {
		if lw.prefix == "wcu" {
			continue
		}
		if lw.revert != 0 {
			e.addNum(limitAttr2(lw.prefix, fieldTokens), lw.revert)
		}
		if lw.s.used != 0 {
			e.addNum(limitAttr2(lw.prefix, fieldConsumed), -lw.s.used)
		}
	}
	if len(e.add) == 0 {
		return nil
	}
	e.condition("attribute_exists(" + e.name(attrPK) + ")")
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(s.cfg.Table), Key: itemKey(it.pk, skState),
		UpdateExpression: e.update(), ConditionExpression: e.conditionExpr(),
		ExpressionAttributeNames: e.attrNames(), ExpressionAttributeValues: e.attrValues(),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	}
	_, _, err := s.update(ctx, in)
	return err
}

// writeTxn sends the writes of a decision as one transaction
// (all-or-nothing). On a failed condition the failing items' old images are
// taken and it reports false.
func (s *Store) writeTxn(ctx context.Context, items []*item, ws []write, now int64) (bool, error) {
	if len(ws) > 100 {
		return false, fmt.Errorf("dynamo: acquire: %d bucket items in one plan, at most 100: %w", len(ws), ErrConflict)
	}
	tx := make([]types.TransactWriteItem, len(ws))
	for i := range ws {
		it := items[ws[i].item]
		e := s.updateFor(it, &ws[i], now)
		tx[i] = types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.cfg.Table), Key: itemKey(it.pk, skState),
			UpdateExpression: e.update(), ConditionExpression: e.conditionExpr(),
			ExpressionAttributeNames: e.attrNames(), ExpressionAttributeValues: e.attrValues(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}}
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: tx, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err == nil {
		for i := range ws {
			it := items[ws[i].item]
			s.setImage(it, guessAfter(it.img, ws[i].limits, it.n, now, ws[i].refill), false)
		}
		return true, nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for i, r := range tce.CancellationReasons {
			if i < len(ws) && aws.ToString(r.Code) == "ConditionalCheckFailed" {
				s.setImage(items[ws[i].item], decodeImage(r.Item), true)
			}
		}
	}
	cerr := classify("transact "+s.cfg.Table, err)
	if errors.Is(cerr, errCondition) || errors.Is(cerr, ErrConflict) {
		return false, nil
	}
	return false, cerr
}

// readCold reads, in one consistent BatchGetItem, every item of the plan
// this replica holds no image of.
func (s *Store) readCold(ctx context.Context, items []*item) error {
	var keys []map[string]types.AttributeValue
	want := map[string][]*item{}
	for _, it := range items {
		if it.img != nil {
			continue
		}
		if _, ok := want[it.pk]; !ok {
			keys = append(keys, itemKey(it.pk, skState))
		}
		want[it.pk] = append(want[it.pk], it)
	}
	if len(keys) == 0 {
		return nil
	}
	got, err := s.batchGet(ctx, keys, true)
	if err != nil {
		return err
	}
	for pk, its := range want {
		img := decodeImage(got[pk+"\x00"+skState])
		for _, it := range its {
			s.setImage(it, img, true)
		}
	}
	return nil
}

// batchGet reads keys (at most 100) and returns the items by PK+"\x00"+SK.
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, consistent bool) (map[string]map[string]types.AttributeValue, error) {
	out := map[string]map[string]types.AttributeValue{}
	for len(keys) > 0 {
		n := min(len(keys), 100)
		req := map[string]types.KeysAndAttributes{s.cfg.Table: {Keys: keys[:n], ConsistentRead: aws.Bool(consistent)}}
		keys = keys[n:]
		for round := 0; len(req) > 0; round++ {
			if round == 3 {
				return nil, fmt.Errorf("dynamo: batch get %s: unprocessed keys after %d rounds: %w", s.cfg.Table, round, ErrThrottled)
			}
			cctx, cancel := s.call(ctx)
			res, err := s.api.BatchGetItem(cctx, &dynamodb.BatchGetItemInput{RequestItems: req, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
			cancel()
			if err != nil {
				return nil, classify("batch get "+s.cfg.Table, err)
			}
			for _, item := range res.Responses[s.cfg.Table] {
				out[getS(item, attrPK)+"\x00"+getS(item, attrSK)] = item
			}
			req = res.UnprocessedKeys
		}
	}
	return out, nil
}

// double doubles the shard count of it's bucket: one transaction sets
// shard_count on every existing shard (creating empty items for shards never
// used), so that no replica keeps writing a shard with the old share, and
// creates the new shards empty (their share was handed out already; they
// fill by refill).
func (s *Store) double(ctx context.Context, it *item) error {
	n := it.n
	tx := make([]types.TransactWriteItem, 2*n)
	for sh := 0; sh < 2*n; sh++ {
		e := newExpr()
		s.setMeta(e, it, sh, 2*n)
		if sh < n {
			e.condition("attribute_not_exists(" + e.name(attrPK) + ") OR " + e.name(attrShardCount) + " = " + e.num(int64(n)))
		} else {
			e.condition("attribute_not_exists(" + e.name(attrPK) + ")")
			e.setAttr(attrEmpty, boolAV(true))
		}
		tx[sh] = types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.cfg.Table), Key: itemKey(bucketPK(it.ns, it.key.Entity, it.key.Resource, sh), skState),
			UpdateExpression: e.update(), ConditionExpression: e.conditionExpr(),
			ExpressionAttributeNames: e.attrNames(), ExpressionAttributeValues: e.attrValues(),
		}}
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		cerr := classify("double shards "+s.cfg.Table, err)
		if !errors.Is(cerr, errCondition) && !errors.Is(cerr, ErrConflict) {
			return cerr
		}
		// Another replica doubled first: learn the count from shard 0.
		it.choose(s, 0)
		it.img = nil
		return nil
	}
	s.obs.ShardDoubled()
	s.log.WithField("shards", 2*n).Info("doubled the shard count of a hot bucket")
	s.learnShards(it.base, 2*n)
	it.n = 2 * n
	it.choose(s, n+rand.IntN(n))
	return nil
}
