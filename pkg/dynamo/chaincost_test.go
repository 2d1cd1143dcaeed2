package dynamo_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// rounds counts round trips of one decision at a time: a call that starts
// while no other is in flight begins a new round; calls that overlap it
// share it. It also counts the writes of one item (the tenant's).
type rounds struct {
	*counter
	inflight, rounds atomic.Int64
	item             string // a PK substring whose writes are counted
	itemWrites       atomic.Int64
	txItems          atomic.Int64 // items of the transactions
}

func (r *rounds) begin() {
	if r.inflight.Add(1) == 1 {
		r.rounds.Add(1)
	}
}

func (r *rounds) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.begin()
	defer r.inflight.Add(-1)
	if pk, ok := in.Key["PK"]; ok && r.item != "" && strings.Contains(fmt.Sprint(pk), r.item) {
		r.itemWrites.Add(1)
	}
	return r.counter.UpdateItem(ctx, in, o...)
}

func (r *rounds) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.begin()
	defer r.inflight.Add(-1)
	return r.counter.GetItem(ctx, in, o...)
}

func (r *rounds) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	r.begin()
	defer r.inflight.Add(-1)
	return r.counter.BatchGetItem(ctx, in, o...)
}

func (r *rounds) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	r.begin()
	defer r.inflight.Add(-1)
	r.txItems.Add(int64(len(in.TransactItems)))
	return r.counter.TransactWriteItems(ctx, in, o...)
}

// BenchmarkChainCost counts DynamoDB round trips, calls and capacity units
// per decision of a three-level chain (key → project → tenant) on DynamoDB
// Local, as the service plans a cascading descriptor, and per settlement of
// the chain (not timed). Run:
//
//	go test ./pkg/dynamo -run '^$' -bench ChainCost -benchtime 200x
func BenchmarkChainCost(b *testing.B) {
	l := dynamotest.Shared(b)
	name := dynamotest.TableName(b)
	l.CreateTable(context.Background(), b, name)
	big := mustLimit(b, 1_000_000, time.Second, 0)
	one := mustLimit(b, 1, time.Hour, 0)
	newS := func(b *testing.B, rejection int) (*dynamo.Store, *rounds) {
		r := &rounds{counter: &counter{API: l.Client(b)}, item: "acme"}
		s, err := dynamo.NewStore(context.Background(), r, dynamo.Config{Table: name, Timeout: 5 * time.Second, RejectionCacheSize: rejection})
		if err != nil {
			b.Fatalf("NewStore() = %v", err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s, r
	}
	chain := func(key, proj, tenant string, tenantLimit tokenbucket.Limit) *cascade.Plan {
		return &cascade.Plan{Debits: []cascade.Debit{
			{Key: cascade.Key{Entity: key, Resource: "llm"}, Limit: "rpm", Bucket: big, Amount: tokenbucket.PerToken},
			{Key: cascade.Key{Entity: proj, Resource: "llm"}, Limit: "rpm", Bucket: big, Amount: tokenbucket.PerToken, Depth: 1},
			{Key: cascade.Key{Entity: tenant, Resource: "llm"}, Limit: "rpm", Bucket: tenantLimit, Amount: tokenbucket.PerToken, Depth: 2},
		}}
	}
	acquire := func(b *testing.B, s *dynamo.Store, p *cascade.Plan, wantAdmit bool) {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil || dec.Admitted != wantAdmit {
			b.Fatalf("Acquire() = %+v, %v, want admitted %t", dec, err, wantAdmit)
		}
	}
	report := func(b *testing.B, r *rounds, decisions int) {
		w, rd, wu, ru := r.reset()
		n := float64(decisions)
		if rt := r.rounds.Swap(0); rt > 0 { // one decision at a time
			b.ReportMetric(float64(rt)/n, "roundtrips/op")
		}
		b.ReportMetric(float64(w)/n, "writes/op")
		b.ReportMetric(float64(r.itemWrites.Swap(0))/n, "tenant-writes/op")
		b.ReportMetric(float64(rd)/n, "reads/op")
		b.ReportMetric(wu/n, "WCU/op")
		b.ReportMetric(ru/n, "RCU/op")
		b.ReportMetric((wu*usdPerMWrite+ru*usdPerMRead)/n, "USD/Mdecisions")
		b.ReportMetric(0, "ns/op")
	}
	warmRun := func(b *testing.B, r *rounds) {
		r.reset()
		r.rounds.Store(0)
		r.itemWrites.Store(0)
		r.txItems.Store(0)
	}
	b.Run("warm", func(b *testing.B) {
		s, r := newS(b, dynamo.DefaultRejectionCacheSize)
		p := chain("w-key", "w-proj", "acme-w", big)
		acquire(b, s, p, true)
		warmRun(b, r)
		for b.Loop() {
			acquire(b, s, p, true)
		}
		report(b, r, b.N)
	})
	b.Run("new_key_warm_parents", func(b *testing.B) {
		s, r := newS(b, dynamo.DefaultRejectionCacheSize)
		acquire(b, s, chain("n-key", "n-proj", "acme-n", big), true)
		warmRun(b, r)
		i := 0
		for b.Loop() {
			i++
			acquire(b, s, chain(fmt.Sprintf("n-key-%d", i), "n-proj", "acme-n", big), true)
		}
		report(b, r, b.N)
	})
	b.Run("cold", func(b *testing.B) {
		s, r := newS(b, dynamo.DefaultRejectionCacheSize)
		warmRun(b, r)
		i := 0
		for b.Loop() {
			i++
			acquire(b, s, chain(fmt.Sprintf("c-key-%d", i), fmt.Sprintf("c-proj-%d", i), fmt.Sprintf("acme-c-%d", i), big), true)
		}
		report(b, r, b.N)
	})
	// A settlement of every level after the fact (a charge on each): one
	// transaction of the marker and the three bucket items, after a
	// strongly consistent read of each (the lane's images are forgotten
	// by a settlement's write).
	b.Run("settle", func(b *testing.B) {
		s, r := newS(b, dynamo.DefaultRejectionCacheSize)
		p := chain("s-key", "s-proj", "acme-s", big)
		acquire(b, s, p, true)
		warmRun(b, r)
		i := 0
		for b.Loop() {
			i++
			st := &cascade.Settlement{ID: fmt.Sprintf("lease-%d", i), Expires: time.Now().Add(time.Hour), Debits: append([]cascade.Debit(nil), p.Debits...)}
			for k := range st.Debits {
				st.Debits[k].Op, st.Debits[k].Amount = cascade.Charge, 1500*tokenbucket.PerToken
			}
			if got, err := s.Settle(context.Background(), st); err != nil || got.Duplicate {
				b.Fatalf("Settle() = %+v, %v, want applied", got, err)
			}
		}
		// DynamoDB bills a transaction 2 WCU per item of up to 1 KB;
		// DynamoDB Local reports 2 for the whole transaction. WCU/op and
		// the price count what AWS bills.
		r.mu.Lock()
		r.wunits = 2 * float64(r.txItems.Swap(0))
		r.mu.Unlock()
		report(b, r, b.N)
	})
	for _, rc := range []struct {
		name string
		size int
	}{{"rejection_cache_on", dynamo.DefaultRejectionCacheSize}, {"rejection_cache_off", dynamo.RejectionCacheOff}} {
		b.Run("parent_refuses_"+rc.name, func(b *testing.B) {
			s, r := newS(b, rc.size)
			tenant := "acme-r-" + rc.name
			acquire(b, s, chain("r-key", "r-proj", tenant, one), true) // the tenant's one token
			acquire(b, s, chain("r-key-0", "r-proj", tenant, one), false)
			warmRun(b, r)
			i := 0
			for b.Loop() {
				i++
				acquire(b, s, chain(fmt.Sprintf("r-key-%d", i%50), "r-proj", tenant, one), false)
			}
			report(b, r, b.N)
		})
	}
	// Three replicas, 90 callers, 1,000 keys under one tenant far below its
	// limit: the tenant's item is written once per batch of decisions.
	b.Run("hot_tenant_3_replicas_90_callers", func(b *testing.B) {
		var stores []*dynamo.Store
		var rs []*rounds
		for range 3 {
			s, r := newS(b, dynamo.DefaultRejectionCacheSize)
			stores, rs = append(stores, s), append(rs, r)
		}
		for k := range 1000 { // every replica warm on every key
			for _, s := range stores {
				acquire(b, s, chain(fmt.Sprintf("h-key-%d", k), fmt.Sprintf("h-proj-%d", k%10), "acme-h", big), true)
			}
		}
		for _, r := range rs {
			warmRun(b, r)
		}
		for _, r := range rs {
			r.rounds.Store(-1 << 40) // concurrent: round trips are not counted
		}
		var wg sync.WaitGroup
		per := max(b.N/90, 1)
		for g := range 90 {
			wg.Go(func() {
				for i := range per {
					k := (g*per + i) % 1000
					if _, err := stores[g%3].Acquire(context.Background(), chain(fmt.Sprintf("h-key-%d", k), fmt.Sprintf("h-proj-%d", k%10), "acme-h", big)); err != nil {
						b.Errorf("Acquire() = %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		sum := &rounds{counter: &counter{}}
		for _, r := range rs {
			w, rd, wu, ru := r.reset()
			sum.writes, sum.reads, sum.wunits, sum.runits = sum.writes+w, sum.reads+rd, sum.wunits+wu, sum.runits+ru
			sum.itemWrites.Add(r.itemWrites.Load())
		}
		report(b, sum, per*90)
	})
}
