package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// perMin is n tokens a minute, a burst of n.
func perMin(t *testing.T, n uint64) tokenbucket.Limit {
	t.Helper()
	l, err := tokenbucket.Rate(n, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// replica is a store on c with a test's clock, as one replica.
func replica(t *testing.T, c rueidis.Client, clock *storetest.Clock, ttl time.Duration) *redisstore.Store {
	t.Helper()
	s := redisstore.New(c, redisstore.Config{Namespace: "ns", Timeout: time.Second, Now: clock.Now, ConfigCacheTTL: ttl})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// take consumes one token of limit rpm (yaml in the plan) of entity's
// bucket of resource r and returns the decision.
func take(t *testing.T, s *redisstore.Store, entity string, yaml tokenbucket.Limit) cascade.Decision {
	t.Helper()
	d := cascade.Debit{Key: cascade.Key{Entity: entity, Resource: "r"}, Limit: "rpm", Bucket: yaml, Amount: tokenbucket.PerToken, Op: cascade.Consume}
	dec, err := s.Acquire(context.Background(), &cascade.Plan{Debits: []cascade.Debit{d}})
	if err != nil {
		t.Fatalf("Acquire(%s): %v", entity, err)
	}
	return dec
}

// admitted counts the admissions of n takes.
func admitted(t *testing.T, s *redisstore.Store, entity string, yaml tokenbucket.Limit, n int) int {
	t.Helper()
	k := 0
	for range n {
		if take(t, s, entity, yaml).Admitted {
			k++
		}
	}
	return k
}

// TestStoredLimitsOverride: the limit of a debit's name stored at the
// most specific scope of its item decides, and the status names it.
func TestStoredLimitsOverride(t *testing.T) { storedOverride(t, server(t)) }

// TestStoredOnCluster: stored limits and chains on a three-master
// cluster, where an entity's records are in its slot and a chain's
// levels in several.
func TestStoredOnCluster(t *testing.T) {
	c, flush := cluster(t)
	t.Run("override", func(t *testing.T) { flush(); storedOverride(t, c) })
	t.Run("chain", func(t *testing.T) { flush(); storedChain(t, c) })
	t.Run("chain in one slot", func(t *testing.T) { flush(); chainInOneSlot(t, c) })
}

// chainInOneSlot: on a cluster the levels of an entity chain share its
// root's slot, so a plan on them is one part (one call of the script),
// and their bucket keys are ChainBucketKey's; unrelated entities are in
// parts. The root of a cycle is the same from each of its entities.
func chainInOneSlot(t *testing.T, c rueidis.Client) {
	clock := storetest.NewClock(time.Unix(1_800_000_000, 0))
	s := replica(t, c, clock, time.Minute)
	ctx := context.Background()
	putChain(t, s)
	yaml := perMin(t, 100)
	debit := func(entity string) cascade.Debit {
		return cascade.Debit{Key: cascade.Key{Entity: entity, Resource: "r"}, Limit: "rpm", Bucket: yaml, Amount: tokenbucket.PerToken, Op: cascade.Consume}
	}
	chain := []cascade.Debit{debit("key#x"), debit("project#x"), debit("tenant#x")}
	if n, err := s.SlotParts(ctx, chain); err != nil || n != 1 {
		t.Fatalf("a chain's plan is in %d parts (%v), want 1: every level in its root's slot", n, err)
	}
	other := "b"
	for i := 0; redisstore.SlotOf(redisstore.BucketKey("ns", cascade.Key{Entity: other})) == redisstore.SlotOf(redisstore.BucketKey("ns", cascade.Key{Entity: "a"})); i++ {
		other = fmt.Sprintf("b%d", i)
	}
	if n, err := s.SlotParts(ctx, []cascade.Debit{debit("a"), debit(other)}); err != nil || n != 2 {
		t.Errorf("two unrelated entities' plan is in %d parts (%v), want 2", n, err)
	}
	dec, err := s.Acquire(ctx, &cascade.Plan{Debits: chain})
	if err != nil || !dec.Admitted {
		t.Fatalf("Acquire(chain) = %+v, %v", dec, err)
	}
	for _, d := range chain {
		root := redisstore.ChainBucketKey("ns", d.Key, "tenant#x")
		own := redisstore.BucketKey("ns", d.Key)
		n, err := c.Do(ctx, c.B().Exists().Key(root).Build()).AsInt64()
		if err != nil || n != 1 {
			t.Errorf("%s: EXISTS %q = %d, %v; want its bucket under the root's tag", d.Key.Entity, root, n, err)
		}
		if own != root {
			if n, _ := c.Do(ctx, c.B().Exists().Key(own).Build()).AsInt64(); n != 0 {
				t.Errorf("%s: its own tag's key %q was written", d.Key.Entity, own)
			}
		}
	}
	// A move under another root moves the key's keys to that root's slot;
	// a move within the root keeps them.
	for _, e := range []redisstore.Entity{{ID: "t2", Cascade: true}, {ID: "p2", Parent: "t2", Cascade: true}, {ID: "p3", Parent: "tenant", Cascade: true}} {
		if _, _, err := s.PutEntity(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for parent, root := range map[string]string{"p3": "tenant", "p2": "t2"} {
		if _, _, err := s.PutEntity(ctx, redisstore.Entity{ID: "key", Parent: parent}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.RootOf(ctx, "ns", "key"); err != nil || r != root {
			t.Errorf("key under %s: root %q (%v), want %s", parent, r, err, root)
		}
	}
	if _, _, err := s.PutEntity(ctx, redisstore.Entity{ID: "key", Parent: "project"}); err != nil {
		t.Fatal(err)
	}
	// A cycle written behind the store's back, every entity on it
	// cascading: one root from each entity.
	for _, w := range [][2]string{{"tenant", "parent"}, {"key", "cascade"}} {
		v := map[string]string{"parent": "key", "cascade": "1"}[w[1]]
		if err := c.Do(ctx, c.B().Hset().Key(s.EntityKey("ns", w[0])).FieldValue().FieldValue(w[1], v).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	var roots []string
	for _, id := range []string{"key", "project", "tenant"} {
		r, err := s.RootOf(ctx, "ns", id)
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, r)
	}
	if roots[0] != "key" || roots[1] != "key" || roots[2] != "key" {
		t.Errorf("roots over a cycle = %q, want key (its least name) from each", roots)
	}
}

func storedOverride(t *testing.T, c rueidis.Client) {
	clock := storetest.NewClock(time.Unix(1_800_000_000, 0))
	s := replica(t, c, clock, time.Minute)
	ctx := context.Background()
	yaml := perMin(t, 100)
	set := func(sc redisstore.Scope, n uint64) {
		t.Helper()
		if _, _, err := s.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"rpm": perMin(t, n)}); err != nil {
			t.Fatal(err)
		}
	}
	set(redisstore.Scope{System: true}, 7)
	set(redisstore.Scope{Resource: "r"}, 5)
	set(redisstore.Scope{Entity: "dflt"}, 3)
	set(redisstore.Scope{Entity: "both"}, 3)
	set(redisstore.Scope{Entity: "both", Resource: "r"}, 2)
	for entity, want := range map[string]int{"nobody": 5, "dflt": 3, "both": 2} {
		if got := admitted(t, s, entity, yaml, 10); got != want {
			t.Errorf("%s: %d of 10 admitted, want %d (its stored limit)", entity, got, want)
		}
	}
	dec := take(t, s, "both", yaml)
	if dec.Admitted || dec.Statuses[0].Bucket != perMin(t, 2) {
		t.Errorf("status = %+v, want refused by the stored limit 2/min", dec.Statuses[0])
	}
	if _, _, err := s.DeleteLimits(ctx, redisstore.Scope{Resource: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Limits(ctx, redisstore.Scope{Resource: "r"}); !errors.Is(err, redisstore.ErrNotFound) {
		t.Errorf("Limits after delete: %v, want ErrNotFound", err)
	}
	if got := admitted(t, s, "other", yaml, 10); got != 7 {
		t.Errorf("with the resource's limit deleted, %d of 10 admitted, want the system's 7", got)
	}
}

// TestStoredLimitsCache: another replica's write is seen once the
// replica's cache entry expires (CONFIG_CACHE_TTL ± 10%), not before.
func TestStoredLimitsCache(t *testing.T) {
	c := server(t)
	clock := storetest.NewClock(time.Unix(1_800_000_000, 0))
	a := replica(t, c, clock, 10*time.Second)
	b := replica(t, c, clock, 10*time.Second)
	yaml := perMin(t, 1000)
	if got := admitted(t, a, "e", yaml, 3); got != 3 {
		t.Fatalf("%d of 3 admitted under the YAML limit", got)
	}
	if _, _, err := b.SetLimits(context.Background(), redisstore.Scope{Entity: "e"}, map[string]tokenbucket.Limit{"rpm": perMin(t, 1)}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(8 * time.Second)
	if got := admitted(t, a, "e", yaml, 3); got != 3 {
		t.Errorf("within the cache's lifetime %d of 3 admitted, want 3 (the YAML limit, as cached)", got)
	}
	if got := admitted(t, b, "e", yaml, 3); got != 1 {
		t.Errorf("the writing replica admitted %d of 3, want 1: it sees its write at once (the level restated to 1/min)", got)
	}
	clock.Advance(4 * time.Second)
	if got := admitted(t, a, "e", yaml, 3); got != 0 {
		t.Errorf("past the cache's lifetime %d of 3 admitted, want 0 (the stored 1/min, spent)", got)
	}
}

// TestStoredChain: a debit of a key charges its stored parents that
// cascade, each under its stored limits; the walk stops at a cycle.
func TestStoredChain(t *testing.T) { storedChain(t, server(t)) }

// putChain stores the entities tenant ← project ← key, the tenant and the
// project cascading.
func putChain(t *testing.T, s *redisstore.Store) {
	t.Helper()
	for _, e := range []redisstore.Entity{{ID: "tenant", Cascade: true}, {ID: "project", Parent: "tenant", Cascade: true}, {ID: "key", Parent: "project"}} {
		if _, _, err := s.PutEntity(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func storedChain(t *testing.T, c rueidis.Client) {
	clock := storetest.NewClock(time.Unix(1_800_000_000, 0))
	s := replica(t, c, clock, time.Minute)
	ctx := context.Background()
	putChain(t, s)
	if _, _, err := s.PutEntity(ctx, redisstore.Entity{ID: "tenant", Parent: "key"}); err == nil {
		t.Error("PutEntity(tenant, parent key) made a cycle")
	}
	if _, _, err := s.SetLimits(ctx, redisstore.Scope{Entity: "tenant"}, map[string]tokenbucket.Limit{"rpm": perMin(t, 2)}); err != nil {
		t.Fatal(err)
	}
	if kids, err := s.Children(ctx, "", "tenant"); err != nil || len(kids) != 1 || kids[0] != "project" {
		t.Errorf("Children(tenant) = %q, %v", kids, err)
	}
	up, err := s.Ancestors(ctx, cascade.Key{Entity: "key#x", Resource: "r"}, 8)
	if err != nil || len(up) != 2 || up[0].Key.Entity != "project#x" || up[1].Key.Entity != "tenant#x" || len(up[0].Limits) != 0 || len(up[1].Limits) != 1 || up[1].Limits[0].Bucket != perMin(t, 2) {
		t.Fatalf("Ancestors = %+v, %v; want project#x, then tenant#x with its rpm 2/min", up, err)
	}
	yaml := perMin(t, 100)
	plan := func() *cascade.Plan {
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "key#x", Resource: "r"}, Limit: "rpm", Bucket: yaml, Amount: tokenbucket.PerToken, Op: cascade.Consume}}}
		for _, a := range up {
			bucket := yaml
			if len(a.Limits) > 0 {
				bucket = a.Limits[0].Bucket
			}
			p.Debits = append(p.Debits, cascade.Debit{Key: a.Key, Limit: "rpm", Bucket: bucket, Amount: tokenbucket.PerToken, Op: cascade.Consume})
		}
		return p
	}
	n := 0
	for range 5 {
		dec, err := s.Acquire(ctx, plan())
		if err != nil {
			t.Fatal(err)
		}
		if dec.Admitted {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d of 5 admitted, want 2: the tenant's stored limit", n)
	}
	for _, e := range []string{"key#x", "project#x"} {
		lv, err := s.Bucket(ctx, cascade.Key{Namespace: "ns", Entity: e, Resource: "r"}, map[string]tokenbucket.Limit{"rpm": yaml})
		if err != nil || len(lv.Limits) != 1 || lv.Limits[0].Tokens != 98*tokenbucket.PerToken {
			t.Errorf("bucket %s = %+v, %v; want 98 tokens left: every level is charged", e, lv, err)
		}
	}
	// A cycle written behind the store's back stops the walk.
	if err := c.Do(ctx, c.B().Hset().Key(s.EntityKey("ns", "tenant")).FieldValue().FieldValue("parent", "key").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if up, err := s.Ancestors(ctx, cascade.Key{Entity: "key", Resource: "r"}, 8); err != nil || len(up) != 2 {
		t.Errorf("Ancestors over a cycle = %+v, %v; want project and tenant, then stop", up, err)
	}
}

// BenchmarkResolveWarm is what the stored limits' resolution adds to a
// decision on a key whose records are cached: no call, the lookups of
// its four scopes.
func BenchmarkResolveWarm(b *testing.B) {
	c := server(b)
	s := redisstore.New(c, redisstore.Config{Namespace: "ns", Timeout: time.Second})
	b.Cleanup(func() { _ = s.Close() })
	l, _ := tokenbucket.Rate(10, time.Second, 100)
	debits := []cascade.Debit{{Key: cascade.Key{Entity: "tenant", Resource: "r"}, Limit: "rps", Bucket: l, Amount: tokenbucket.PerToken, Op: cascade.Consume}}
	ctx := context.Background()
	if _, err := s.Resolve(ctx, debits); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Resolve(ctx, debits); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSplitStoredLimits: with REDIS_PERSECOND the records are Main's, and
// a limit stored a second long is decided on the per-second Redis.
func TestSplitStoredLimits(t *testing.T) {
	mainC, psC := server(t), server(t)
	clock := storetest.NewClock(time.Unix(1_800_000_000, 0))
	sp := redisstore.NewSplit(replica(t, mainC, clock, time.Minute), replica(t, psC, clock, time.Minute))
	ctx := context.Background()
	perSec, _ := tokenbucket.Rate(1, time.Second, 0)
	if _, _, err := sp.SetLimits(ctx, redisstore.Scope{Entity: "e"}, map[string]tokenbucket.Limit{"rpm": perSec}); err != nil {
		t.Fatal(err)
	}
	d := cascade.Debit{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: perMin(t, 100), Amount: tokenbucket.PerToken, Op: cascade.Consume}
	var got []bool
	for range 2 {
		dec, err := sp.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{d}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, dec.Admitted)
	}
	if !got[0] || got[1] {
		t.Errorf("admitted %v, want the stored 1/s: one, then refused", got)
	}
	lv, err := sp.PerSecond.Bucket(ctx, cascade.Key{Namespace: "ns", Entity: "e", Resource: "r"}, map[string]tokenbucket.Limit{"rpm": perSec})
	if err != nil || len(lv.Limits) != 1 || !lv.Limits[0].Stored {
		t.Errorf("the per-second Redis holds %+v, %v; want the level of the stored 1/s", lv, err)
	}
}
