package dynamo_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestFloodKeepsHotCaches: under a flood of distinct keys, each read,
// written, refused once (a rejection-cache entry) and never seen again,
// with every cache bounded to 32 entries, a hot key decided between flood
// keys keeps its cache hits: each of its decisions is one write and no
// read (its image, its stored-limit records and its shard count stay
// cached, least recently used eviction dropping flood entries instead),
// and no cache holds more than its size.
func TestFloodKeepsHotCaches(t *testing.T) {
	const size, flood = 32, 200
	for _, be := range backends() {
		t.Run(be.Name, func(t *testing.T) {
			api, table := be.API(t)
			c := &counter{API: api}
			s := newStoreCfg(t, c, dynamo.Config{Table: table, Timeout: 2 * time.Second, RejectionCacheSize: size}, newClock(), dynamo.WithCacheSize(size))
			plenty, once := mustLimit(t, 1_000_000, time.Second, 0), mustLimit(t, 1, time.Hour, 0)
			plan := func(entity string, l tokenbucket.Limit) *cascade.Plan {
				return &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: entity, Resource: "r"}, Limit: "rpm", Bucket: l, Amount: tokenbucket.PerToken}}}
			}
			acquire := func(p *cascade.Plan, want bool) {
				t.Helper()
				dec, err := s.Acquire(context.Background(), p)
				if err != nil || dec.Admitted != want {
					t.Fatalf("Acquire(%s) = %+v, %v, want admitted %t", p.Debits[0].Key.Entity, dec, err, want)
				}
			}
			hot := plan("hot", plenty)
			acquire(hot, true)
			acquire(hot, true)
			for i := range flood {
				p := plan(fmt.Sprint("flood-", i), once)
				acquire(p, true)
				acquire(p, false)
				c.reset()
				acquire(hot, true)
				if w, r, _, _ := c.reset(); r != 0 || w != 1 {
					t.Fatalf("hot decision after %d flood keys: %d reads and %d writes, want 0 and 1", i+1, r, w)
				}
			}
			stats := s.CacheStats()
			byName := map[string]dynamo.CacheStats{}
			for _, st := range stats {
				byName[st.Name] = st
				if st.Capacity != size || st.Entries > st.Capacity {
					t.Errorf("CacheStats() %s = %+v, want at most %d entries of capacity %d", st.Name, st, size, size)
				}
			}
			for _, name := range []string{dynamo.CacheImage, dynamo.CacheConfig, dynamo.CacheShard} {
				if st := byName[name]; st.Evictions == 0 || st.Hits < flood {
					t.Errorf("CacheStats() %s = %+v, want evictions and the hot key's hits after %d flood keys", name, st, flood)
				}
				// Counters only count up: none past what the run could make.
				if st := byName[name]; st.Misses == 0 || max(st.Hits, st.Misses, st.Evictions) > 100*flood {
					t.Errorf("CacheStats() %s = %+v, want misses, and no counter past %d after %d flood keys", name, st, 100*flood, flood)
				}
			}
			if st := byName[dynamo.CacheRejection]; st.Evictions == 0 || st.Evictions > flood {
				t.Errorf("CacheStats() rejection = %+v, want evictions after %d refusals", st, flood)
			}
			t.Logf("%+v", stats)
		})
	}
}

// TestHookPanics: a WithCallContext hook that panics, or a join hook that
// does, is logged and leaves the call's context as it is: decisions are
// still made, by reads and writes alike.
func TestHookPanics(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable(fake) = %v", err)
	}
	var calls atomic.Int64
	s := newStore(t, f, "t", newClock(), dynamo.WithCallContext(func(call context.Context, _ []context.Context) context.Context {
		calls.Add(1)
		if calls.Load()%2 == 0 {
			return dynamo.WithCallJoin(call, func(context.Context) { panic("join hook") })
		}
		panic("call-context hook")
	}))
	l := mustLimit(t, 10, time.Second, 0)
	for i := range 4 {
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: fmt.Sprint("e", i), Resource: "r"}, Limit: "rps", Bucket: l, Amount: tokenbucket.PerToken}}}
		if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
			t.Fatalf("Acquire(e%d) with a panicking hook = %+v, %v, want admitted", i, dec, err)
		}
	}
	if calls.Load() == 0 {
		t.Fatalf("the call-context hook was never called")
	}
}

// TestReadPanics: a read that panics (here, in the DynamoDB client) does
// not take the process down, and the decisions waiting for it are refused
// as contended (never an error that ON_UNAVAILABLE=allow would admit); it
// releases its keys: the next decision reads them again.
func TestReadPanics(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable(fake) = %v", err)
	}
	s := newStore(t, f, "t", newClock())
	f.SetFail(func(_ context.Context, op string) error {
		if op == "BatchGetItem" {
			panic("client")
		}
		return nil
	})
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "rps", Bucket: mustLimit(t, 10, time.Second, 0), Amount: tokenbucket.PerToken}}}
	if dec, err := s.Acquire(context.Background(), p); err != nil || dec.Admitted {
		t.Fatalf("Acquire() while reads panic = %+v, %v, want refused without an error", dec, err)
	}
	f.SetFail(nil)
	if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
		t.Fatalf("Acquire() after = %+v, %v, want admitted", dec, err)
	}
}

// TestHooksRunWithoutStoreLocks: the call-context hook of a read runs while
// the store holds no lock of its own. The hook here breaks its contract
// (it calls the store) only to show that: had the read's hook run under
// the lock of the reads in flight, the nested decision would deadlock.
func TestHooksRunWithoutStoreLocks(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable(fake) = %v", err)
	}
	l := mustLimit(t, 10, time.Second, 0)
	// The nested plan shares no record with the outer one (namespace,
	// entity, resource): it never waits for the outer read.
	plan := func(e string) *cascade.Plan {
		return &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: e, Entity: e, Resource: e}, Limit: "rps", Bucket: l, Amount: tokenbucket.PerToken}}}
	}
	var s *dynamo.Store
	var nested atomic.Bool
	nestedErr := make(chan error, 1)
	s = newStore(t, f, "t", newClock(), dynamo.WithCallContext(func(call context.Context, _ []context.Context) context.Context {
		if nested.CompareAndSwap(false, true) {
			_, err := s.Acquire(context.Background(), plan("nested"))
			nestedErr <- err
		}
		return call
	}))
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), plan("outer"))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire(outer) = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Acquire(outer) did not return within 10 s: its hook ran under a store lock")
	}
	if err := <-nestedErr; err != nil {
		t.Fatalf("Acquire(nested, from the hook) = %v", err)
	}
}

// BenchmarkFloodCost counts the DynamoDB calls and capacity a flood of
// distinct keys costs per call on DynamoDB Local (not timed): each new key
// alone, and each new key under a tenant bucket (a hierarchy's parent) that
// is exhausted, whose refusal the rejection cache answers (and, for
// comparison, with the rejection cache off). Run:
//
//	go test ./pkg/dynamo -run '^$' -bench FloodCost -benchtime 300x
func BenchmarkFloodCost(b *testing.B) {
	l := dynamotest.Shared(b)
	name := dynamotest.TableName(b)
	l.CreateTable(context.Background(), b, name)
	plenty, once := mustLimit(b, 1_000_000, time.Second, 0), mustLimit(b, 1, time.Hour, 0)
	debit := func(entity string, lim tokenbucket.Limit) cascade.Debit {
		return cascade.Debit{Key: cascade.Key{Entity: entity, Resource: "r"}, Limit: "rph", Bucket: lim, Amount: tokenbucket.PerToken}
	}
	for _, bc := range []struct {
		bench      string
		tenant     bool
		rejections int
	}{
		{"new_key", false, dynamo.DefaultRejectionCacheSize},
		{"new_key_under_exhausted_tenant", true, dynamo.DefaultRejectionCacheSize},
		{"new_key_under_exhausted_tenant_no_rejection_cache", true, dynamo.RejectionCacheOff},
	} {
		bench, tenant := bc.bench, bc.tenant
		b.Run(bench, func(b *testing.B) {
			c := &counter{API: l.Client(b)}
			s, err := dynamo.NewStore(context.Background(), c, dynamo.Config{Table: name, Timeout: 5 * time.Second, RejectionCacheSize: bc.rejections})
			if err != nil {
				b.Fatalf("NewStore() = %v", err)
			}
			defer s.Close()
			plan := func(i int) *cascade.Plan {
				p := &cascade.Plan{Debits: []cascade.Debit{debit(fmt.Sprintf("%s-%d", bench, i), plenty)}}
				if tenant {
					p.Debits = append(p.Debits, debit("tenant", once))
				}
				return p
			}
			for i := range 3 { // warm: the shared records; the tenant drained and refused
				if _, err := s.Acquire(context.Background(), plan(-1-i)); err != nil {
					b.Fatalf("Acquire() = %v", err)
				}
			}
			c.reset()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				dec, err := s.Acquire(context.Background(), plan(i))
				if err != nil || dec.Admitted == tenant {
					b.Fatalf("Acquire(new key %d) = %+v, %v, want admitted %t", i, dec, err, !tenant)
				}
				i++
			}
			w, r, wu, ru := c.reset()
			n := float64(b.N)
			b.ReportMetric(float64(w)/n, "writes/op")
			b.ReportMetric(float64(r)/n, "reads/op")
			b.ReportMetric(wu/n, "WCU/op")
			b.ReportMetric(ru/n, "RCU/op")
			b.ReportMetric((wu*usdPerMWrite+ru*usdPerMRead)/n, "USD/Mcalls")
			b.ReportMetric(0, "ns/op")
		})
	}
}

type decisionKey struct{}

// TestJoinWhileContextIsMade: a decision that joins a read while the read's
// call-context hook is still making its context (the hook runs outside the
// store's locks, so it can) is told to the join hook all the same.
func TestJoinWhileContextIsMade(t *testing.T) {
	f := dynamotest.NewFake()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable(fake) = %v", err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var joined []any
	var first atomic.Bool
	s := newStore(t, f, "t", newClock(), dynamo.WithCallContext(func(call context.Context, _ []context.Context) context.Context {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return dynamo.WithCallJoin(call, func(d context.Context) {
			mu.Lock()
			defer mu.Unlock()
			joined = append(joined, d.Value(decisionKey{}))
		})
	}))
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "rps", Bucket: mustLimit(t, 10, time.Second, 0), Amount: tokenbucket.PerToken}}}
	errs := make(chan error, 2)
	acquire := func(name string) {
		ctx := context.WithValue(context.Background(), decisionKey{}, name)
		_, err := s.Acquire(ctx, p)
		errs <- err
	}
	go acquire("first")
	<-entered
	go acquire("second")
	time.Sleep(100 * time.Millisecond) // the second decision finds the read being made
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(joined, any("second")) {
		t.Errorf("join told of decisions %v, want the second among them", joined)
	}
}
