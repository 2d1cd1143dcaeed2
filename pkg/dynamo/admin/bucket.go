package dynamo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// LimitState is one limit of one shard of a bucket as the table holds it.
type LimitState struct {
	// Name is the limit's name (a name longer than 64 bytes escaped is
	// stored hashed, and shows as "~" and its hash).
	Name string
	// Limit is the limit the shard is read with: the one its level was
	// written with, else the one given to Bucket.
	Limit tokenbucket.Limit
	// Tokens is what the shard holds now: its share (1/ShardCount) of the
	// level's tokens, negative in debt.
	Tokens tokenbucket.Millitokens
	// FullIn is how long until the limit is full again.
	FullIn time.Duration
	// Consumed is the running total of millitokens debited on this shard
	// (consumes and charges, less refunds), the usage counter.
	Consumed int64
	// Stored reports whether the shard holds a level for the limit; a
	// limit without one is full (or empty, on a shard created empty by a
	// doubling).
	Stored bool
}

// ShardState is one shard of a bucket.
type ShardState struct {
	Shard int
	// Exists reports whether the shard's item exists; a shard without an
	// item is full.
	Exists bool
	// Limits are the shard's limits, by name.
	Limits []LimitState
}

// BucketState is what a bucket holds on every shard, read at At.
type BucketState struct {
	// Key is the bucket's key, its namespace resolved.
	Key cascade.Key
	// ShardCount is the bucket's shard count (1 when it has no item).
	ShardCount int
	Shards     []ShardState
	At         time.Time
}

// Exists reports whether some shard of the bucket has an item: a bucket
// without one is full.
func (b BucketState) Exists() bool {
	for _, sh := range b.Shards {
		if sh.Exists {
			return true
		}
	}
	return false
}

// Total returns what the bucket holds of each limit on all its shards,
// by name, and the limit it is read with.
func (b BucketState) Total() map[string]LimitState {
	out := map[string]LimitState{}
	for _, sh := range b.Shards {
		for _, l := range sh.Limits {
			t := out[l.Name]
			t.Name, t.Limit, t.Stored = l.Name, l.Limit, t.Stored || l.Stored
			t.Tokens += l.Tokens
			t.Consumed += l.Consumed
			t.FullIn = max(t.FullIn, l.FullIn)
			out[l.Name] = t
		}
	}
	return out
}

// Bucket reads every shard of key's bucket (strongly consistent; shard 0
// first, which holds the shard count) and returns what each holds of every
// limit its item stores (read with the limit its level was written with)
// and of every other limit in limits (full, as a limit the item does not
// store is, unless the shard was created empty by a doubling). It
// never writes: a bucket read costs nothing of its tokens. Cost: one read
// unit per shard.
func (s *Store) Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, error) {
	if s.closed.Load() {
		return BucketState{}, errClosed
	}
	_, imgs, err := inspector{s}.readShards(ctx, key)
	if err != nil {
		return BucketState{}, err
	}
	return inspector{s}.bucketState(key, imgs, limits), nil
}

// readShards reads shard 0 of key's bucket, then every other shard its
// shard count names.
func (s inspector) readShards(ctx context.Context, key cascade.Key) (bucket, []*item.Image, error) {
	b := s.bucketsOf(&cascade.Plan{Debits: []cascade.Debit{{Key: key}}})[0]
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	first, err := s.readBucket(cctx, b.pk(0))
	if err != nil {
		return b, nil, err
	}
	imgs := []*item.Image{first}
	if !first.Exists {
		return b, imgs, nil
	}
	for sh := 1; sh < first.ShardCount; sh++ {
		img, err := s.readBucket(cctx, b.pk(sh))
		if err != nil {
			return b, nil, err
		}
		imgs = append(imgs, img)
	}
	return b, imgs, nil
}

// bucketState decodes the shards' images at the store's clock.
func (s inspector) bucketState(key cascade.Key, imgs []*item.Image, limits map[string]tokenbucket.Limit) BucketState {
	now := s.nowMs()
	key.Namespace = s.ns(key)
	n := len(imgs)
	st := BucketState{Key: key, ShardCount: n, At: time.UnixMilli(now)}
	for sh, img := range imgs {
		ss := ShardState{Shard: sh, Exists: img.Exists}
		for prefix, l := range shardLimits(img, limits) {
			lv, fresh := startLevel(img, prefix, l.Limit, now)
			li, _ := img.Has(prefix)
			ls := lv.State()
			ss.Limits = append(ss.Limits, LimitState{
				Name: l.Name, Limit: l.Limit, Stored: !fresh, Consumed: li.Consumed,
				Tokens: shardShare(l.Limit.Tokens(ls, now), n), FullIn: l.Limit.TimeToFull(ls, now),
			})
		}
		sort.Slice(ss.Limits, func(i, j int) bool { return ss.Limits[i].Name < ss.Limits[j].Name })
		st.Shards = append(st.Shards, ss)
	}
	return st
}

// shardLimits returns the limits to read a shard with, by attribute
// prefix: every limit the item stores, with the limit its level was
// written with, and those given that it does not store (a level without a
// valid limit is read with the one given, else left out: it cannot be
// read).
func shardLimits(img *item.Image, limits map[string]tokenbucket.Limit) map[string]LimitState {
	out := map[string]LimitState{}
	for name, l := range limits {
		out[item.LimitPrefix(name)] = LimitState{Name: name, Limit: l}
	}
	for prefix, li := range img.LimitsOrNil() {
		if li.Shape.Validate() != nil {
			continue
		}
		name := limitName(prefix)
		if given, ok := out[prefix]; ok {
			name = given.Name
		}
		out[prefix] = LimitState{Name: name, Limit: li.Shape}
	}
	return out
}

// limitName is the name of the limit whose attribute prefix is prefix:
// "b_" + esc(name) with the escape undone (a hashed name stays hashed).
func limitName(prefix string) string {
	esc := strings.TrimPrefix(prefix, "b_")
	if name, err := url.PathUnescape(esc); err == nil {
		return name
	}
	return esc
}

// resetAttempts bounds how often ResetBucket reads and writes again after
// the bucket's shard count changed under it.
const resetAttempts = 3

// ResetBucket refills every limit of key's bucket to its capacity on every
// shard: every limit its items store (the capacity of the limit its level
// was written with) and every other limit in limits. It reads every shard,
// then writes them and an audit record under key's entity (action
// "bucket.reset", with the principal, see WithPrincipal) in one
// TransactWriteItems: every shard's update is conditional on the item
// existing with the shard count read, so a reset lands whole on the shards
// as they are, or not at all (a doubling meanwhile: it reads again, up to 3
// times). The usage counters (consumed) are kept. It returns the bucket as
// it was before, and false with no write when the bucket has no item (a
// bucket without one is full). Replicas that cached a refusal of it
// answer from that cache until the refusal's retry-after, at most a second.
// Cost: 2 write units per shard and 2 for the audit record, and a read
// unit per shard.
func (s *Store) ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (BucketState, bool, error) {
	return inspector{s}.rewrite(ctx, key, limits, func(b bucket, imgs []*item.Image, before BucketState) error {
		return inspector{s}.writeReset(ctx, b, imgs, limits, before)
	})
}

// rewrite reads key's bucket and calls write with it, again (up to
// resetAttempts reads) while write's condition on the shard count fails,
// then forgets the images it changed. It returns the bucket as it was, and
// false with no write when the bucket has no item.
func (s inspector) rewrite(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit, write func(bucket, []*item.Image, BucketState) error) (BucketState, bool, error) {
	if s.closed.Load() {
		return BucketState{}, false, errClosed
	}
	for attempt := 1; ; attempt++ {
		b, imgs, err := s.readShards(ctx, key)
		if err != nil {
			return BucketState{}, false, err
		}
		before := s.bucketState(key, imgs, limits)
		if !before.Exists() {
			return before, false, nil
		}
		err = write(b, imgs, before)
		if errors.Is(err, ErrCondition) && attempt < resetAttempts {
			continue
		}
		if err != nil {
			return BucketState{}, false, err
		}
		for sh := range imgs {
			cacher(s).forgetImage(b.pk(sh))
		}
		return before, true, nil
	}
}

// writeReset writes the full levels of every existing shard of b and the
// audit record in one transaction.
func (s inspector) writeReset(ctx context.Context, b bucket, imgs []*item.Image, limits map[string]tokenbucket.Limit, before BucketState) error {
	now := s.nowMs()
	n := len(imgs)
	var tx []types.TransactWriteItem
	for sh, img := range imgs {
		if !img.Exists {
			continue
		}
		e := item.NewExpr()
		for prefix, l := range shardLimits(img, limits) {
			e.SetAttr(prefix+"_"+item.FieldLevel, item.BigAV(l.Limit.Full(now).X))
			setShape(e, prefix, l.Limit)
		}
		e.SetAttr(item.AttrTTL, item.NumAV(now/1000+int64(minBucketTTL.Seconds())))
		e.RemoveAttr(item.AttrEmpty)
		e.Condition("attribute_exists(" + e.Name(item.AttrPK) + ") AND " + e.Name(item.AttrShardCount) + " = " + e.Num(int64(n)))
		tx = append(tx, s.txUpdate(b.pk(sh), e))
	}
	sc := Scope{Namespace: b.ns, Entity: b.key.Entity, Resource: b.key.Resource}
	tx = append(tx, types.TransactWriteItem{Put: s.tbl.AuditPut(b.ns, sc, "bucket.reset", bucketString(before), fmt.Sprintf("shards=%d full", n))})
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	if _, err := s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx}); err != nil {
		return Classify("reset bucket", err)
	}
	return nil
}

// bucketString is an audit record's account of a bucket: each limit's
// tokens left of its capacity, on all shards.
func bucketString(b BucketState) string {
	tot := b.Total()
	names := make([]string, 0, len(tot))
	for n := range tot {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		l := tot[n]
		parts = append(parts, fmt.Sprintf("%s=%s/%s", n, formatTokens(l.Tokens), formatTokens(l.Limit.Capacity)))
	}
	return fmt.Sprintf("shards=%d %s", b.ShardCount, strings.Join(parts, " "))
}

// formatTokens writes millitokens as tokens, with the thousandths when
// there are any.
func formatTokens(m tokenbucket.Millitokens) string {
	if m%tokenbucket.PerToken == 0 {
		return fmt.Sprint(int64(m / tokenbucket.PerToken))
	}
	return fmt.Sprintf("%.3f", float64(m)/float64(tokenbucket.PerToken))
}

// inspector reads and rewrites a bucket's shards for the admin commands (inspect.go, topup.go).
type inspector struct{ *Store }
