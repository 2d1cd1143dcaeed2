package admin

import (
	"context"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
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
	if err := s.st.CheckOpen(); err != nil {
		return BucketState{}, err
	}
	_, imgs, err := s.readShards(ctx, key)
	if err != nil {
		return BucketState{}, err
	}
	return s.bucketState(key, imgs, limits), nil
}

// bucketRef names the items of one bucket: its key and its namespace,
// resolved.
type bucketRef struct {
	key cascade.Key
	ns  string
}

// pk is the key of the bucket's item of shard shard.
func (b bucketRef) pk(shard int) string {
	return item.BucketPK(b.ns, b.key.Entity, b.key.Resource, shard)
}

// readShards reads shard 0 of key's bucket, then every other shard its
// shard count names.
func (s *Store) readShards(ctx context.Context, key cascade.Key) (bucketRef, []*item.Image, error) {
	b := bucketRef{key: key, ns: s.t.NsOr(key.Namespace)}
	cctx, cancel := s.t.Call(ctx)
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

// readBucket reads one bucket item, strongly consistent, within ctx.
func (s *Store) readBucket(ctx context.Context, pk string) (*item.Image, error) {
	out, err := s.t.API.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.Name), Key: item.Key(pk, item.SKState),
		ConsistentRead: aws.Bool(true), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return nil, dynamo.Classify("get "+s.t.Name, err)
	}
	img, err := item.Decode(out.Item)
	if err != nil {
		return nil, err
	}
	img.AtMs = s.t.Now().UnixMilli()
	return img, nil
}

// bucketState decodes the shards' images at the store's clock.
func (s *Store) bucketState(key cascade.Key, imgs []*item.Image, limits map[string]tokenbucket.Limit) BucketState {
	now := s.t.Now().UnixMilli()
	key.Namespace = s.t.NsOr(key.Namespace)
	n := len(imgs)
	st := BucketState{Key: key, ShardCount: n, At: time.UnixMilli(now)}
	for sh, img := range imgs {
		ss := ShardState{Shard: sh, Exists: img.Exists}
		for prefix, l := range shardLimits(img, limits) {
			li, stored := img.Has(prefix)
			ls := shardLevel(img, li, stored, l.Limit, now)
			ss.Limits = append(ss.Limits, LimitState{
				Name: l.Name, Limit: l.Limit, Stored: stored, Consumed: li.Consumed,
				Tokens: shardShare(l.Limit.Tokens(ls, now), n), FullIn: l.Limit.TimeToFull(ls, now),
			})
		}
		sort.Slice(ss.Limits, func(i, j int) bool { return ss.Limits[i].Name < ss.Limits[j].Name })
		st.Shards = append(st.Shards, ss)
	}
	return st
}

// shardLevel is the level of a limit l of a shard as a decision starts
// from it: the one stored (li, when stored), else a new bucket's, full, or
// empty on a shard a doubling created (its share was handed out already).
// shardLimits reads a stored level with the limit it was written with, so
// the level is never restated.
func shardLevel(img *item.Image, li item.LimitImage, stored bool, l tokenbucket.Limit, now int64) tokenbucket.State {
	switch {
	case stored:
		return tokenbucket.State{X: li.Level}
	case img.Exists && img.Empty:
		return l.Empty(now)
	default:
		return l.Full(now)
	}
}

// shardShare is a shard's share of what a level of a bucket of n shards
// holds, in whole millitokens rounded toward −∞: a shard holds 1/n of its
// level (as the decision store counts it).
func shardShare(t tokenbucket.Millitokens, n int) tokenbucket.Millitokens {
	q := t / tokenbucket.Millitokens(n)
	if t%tokenbucket.Millitokens(n) != 0 && t < 0 {
		q--
	}
	return q
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
