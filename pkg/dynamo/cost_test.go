package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// On-demand prices in US dollars per million request units (us-east-1).
const (
	usdPerMWrite = 0.625
	usdPerMRead  = 0.125
)

// counter counts calls and the capacity DynamoDB reports consumed; a failed
// conditional write reports none but is billed one write unit.
type counter struct {
	dynamo.API
	mu             sync.Mutex
	writes, reads  int
	wunits, runits float64
}

func (c *counter) add(write bool, n int, units float64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ccf *types.ConditionalCheckFailedException
	var tce *types.TransactionCanceledException
	if errors.As(err, &ccf) {
		units = 1
	} else if errors.As(err, &tce) {
		units = float64(n)
	}
	if write {
		c.writes++
		c.wunits += units
	} else {
		c.reads++
		c.runits += units
	}
}

func (c *counter) reset() (w, r int, wu, ru float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, r, wu, ru = c.writes, c.reads, c.wunits, c.runits
	c.writes, c.reads, c.wunits, c.runits = 0, 0, 0, 0
	return
}

func units(cc *types.ConsumedCapacity) float64 {
	if cc == nil {
		return 0
	}
	return aws.ToFloat64(cc.CapacityUnits)
}

func (c *counter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.API.UpdateItem(ctx, in, o...)
	var u float64
	if out != nil {
		u = units(out.ConsumedCapacity)
	}
	c.add(true, 1, u, err)
	return out, err
}

func (c *counter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := c.API.TransactWriteItems(ctx, in, o...)
	var u float64
	if out != nil {
		for _, cc := range out.ConsumedCapacity {
			u += units(&cc)
		}
	}
	c.add(true, 2*len(in.TransactItems), u, err)
	return out, err
}

func (c *counter) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	out, err := c.API.BatchGetItem(ctx, in, o...)
	var u float64
	if out != nil {
		for _, cc := range out.ConsumedCapacity {
			u += units(&cc)
		}
	}
	if u == 0 && err == nil {
		// DynamoDB Local reports no capacity for BatchGetItem: bill as
		// DynamoDB does, per requested item up to 4 KB (strongly
		// consistent 1 unit, eventually consistent 0.5).
		for _, ka := range in.RequestItems {
			per := 0.5
			if aws.ToBool(ka.ConsistentRead) {
				per = 1
			}
			u += per * float64(len(ka.Keys))
		}
	}
	c.add(false, 1, u, err)
	return out, err
}

func (c *counter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := c.API.GetItem(ctx, in, o...)
	var u float64
	if out != nil {
		u = units(out.ConsumedCapacity)
	}
	c.add(false, 1, u, err)
	return out, err
}

// BenchmarkDecisionCost counts DynamoDB calls and consumed capacity units
// per decision on DynamoDB Local (not timed: Local serialises writes). Run:
//
//	go test ./pkg/dynamo -run '^$' -bench DecisionCost -benchtime 200x
func BenchmarkDecisionCost(b *testing.B) {
	l := dynamotest.Shared(b)
	name := dynamotest.TableName(b)
	l.CreateTable(context.Background(), b, name)
	big := mustLimit(b, 1_000_000, time.Second, 0)
	one := mustLimit(b, 1, time.Hour, 0)
	newS := func(b *testing.B) (*dynamo.Store, *counter) {
		c := &counter{API: l.Client(b)}
		s, err := dynamo.NewStore(context.Background(), c, dynamo.Config{Table: name, Timeout: 5 * time.Second, RejectionCacheSize: dynamo.DefaultRejectionCacheSize})
		if err != nil {
			b.Fatalf("NewStore() = %v", err)
		}
		return s, c
	}
	debit := func(k cascade.Key, lim tokenbucket.Limit) cascade.Debit {
		return cascade.Debit{Key: k, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}
	}
	report := func(b *testing.B, c *counter, decisions int) {
		w, r, wu, ru := c.reset()
		n := float64(decisions)
		b.ReportMetric(float64(w)/n, "writes/op")
		b.ReportMetric(float64(r)/n, "reads/op")
		b.ReportMetric(wu/n, "WCU/op")
		b.ReportMetric(ru/n, "RCU/op")
		b.ReportMetric((wu*usdPerMWrite+ru*usdPerMRead)/n, "USD/Mdecisions")
		b.ReportMetric(0, "ns/op")
	}
	acquire := func(b *testing.B, s *dynamo.Store, p *cascade.Plan, wantAdmit bool) {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil || dec.Admitted != wantAdmit {
			b.Fatalf("Acquire() = %+v, %v, want admitted %t", dec, err, wantAdmit)
		}
	}
	b.Run("steady_admitted", func(b *testing.B) {
		b.ReportAllocs()
		s, c := newS(b)
		p := &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: "steady", Resource: "r"}, big)}}
		acquire(b, s, p, true) // warm: config and first image
		c.reset()
		for b.Loop() {
			acquire(b, s, p, true)
		}
		report(b, c, b.N)
	})
	b.Run("priced_charge_monthly_budget", func(b *testing.B) {
		// A stream-end report of 100k input and 40k output tokens at $3
		// and $15 per million ($0.90, 9·10^8 nano-dollars) charged to a
		// monthly budget of a million dollars in New York.
		b.ReportAllocs()
		s, c := newS(b)
		cal, err := tokenbucket.NewCalendar(tokenbucket.Monthly, "America/New_York")
		if err != nil {
			b.Fatal(err)
		}
		usd, err := tokenbucket.Budget(1_000_000_000_000*tokenbucket.PerToken, cal, true)
		if err != nil {
			b.Fatal(err)
		}
		d := cascade.Debit{Key: cascade.Key{Entity: "team", Resource: "llm"}, Limit: "monthly_usd", Bucket: usd, Op: cascade.Charge, Amount: 900_000_000}
		p := &cascade.Plan{Debits: []cascade.Debit{d}}
		acquire(b, s, p, true)
		c.reset()
		for b.Loop() {
			acquire(b, s, p, true)
		}
		report(b, c, b.N)
	})
	b.Run("repeated_refusals", func(b *testing.B) {
		b.ReportAllocs()
		s, c := newS(b)
		p := &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: "refused", Resource: "r"}, one)}}
		acquire(b, s, p, true)
		acquire(b, s, p, false) // the refusal that primes the cache
		c.reset()
		for b.Loop() {
			acquire(b, s, p, false)
		}
		report(b, c, b.N)
	})
	b.Run("first_decision_new_bucket", func(b *testing.B) {
		b.ReportAllocs()
		s, c := newS(b)
		acquire(b, s, &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: "warm", Resource: "r"}, big)}}, true)
		c.reset()
		i := 0
		for b.Loop() {
			i++
			acquire(b, s, &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: fmt.Sprintf("new-%d", i), Resource: "r"}, big)}}, true)
		}
		report(b, c, b.N)
	})
	b.Run("two_descriptors", func(b *testing.B) {
		b.ReportAllocs()
		s, c := newS(b)
		p := &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: "two-a", Resource: "r"}, big), debit(cascade.Key{Entity: "two-b", Resource: "r"}, big)}}
		acquire(b, s, p, true)
		c.reset()
		for b.Loop() {
			acquire(b, s, p, true)
		}
		report(b, c, b.N)
	})
	b.Run("realistic_entity_256B", func(b *testing.B) {
		b.ReportAllocs()
		s, c := newS(b)
		key := cascade.Key{Entity: "x-api-key=" + strings.Repeat("k", 246), Resource: "llm/" + strings.Repeat("m", 252)}
		p := &cascade.Plan{Debits: []cascade.Debit{debit(key, big)}}
		acquire(b, s, p, true)
		c.reset()
		for b.Loop() {
			acquire(b, s, p, true)
		}
		report(b, c, b.N)
	})
	// Three replicas on one hot bucket: decisions queued on an item within
	// a replica share one conditional write, and writers commute.
	b.Run("hot_bucket_3_replicas_90_callers", func(b *testing.B) {
		b.ReportAllocs()
		var stores []*dynamo.Store
		var counters []*counter
		for range 3 {
			s, c := newS(b)
			stores, counters = append(stores, s), append(counters, c)
		}
		p := &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: "hot3", Resource: "r"}, big)}}
		for i, s := range stores {
			acquire(b, s, p, true)
			counters[i].reset()
		}
		var wg sync.WaitGroup
		per := max(b.N/90, 1)
		for g := range 90 {
			wg.Go(func() {
				for range per {
					if _, err := stores[g%3].Acquire(context.Background(), p); err != nil {
						b.Errorf("Acquire() = %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		sum := &counter{}
		for _, c := range counters {
			w, r, wu, ru := c.reset()
			sum.writes, sum.reads, sum.wunits, sum.runits = sum.writes+w, sum.reads+r, sum.wunits+wu, sum.runits+ru
		}
		report(b, sum, per*90)
	})
	b.Run("hot_bucket_50_callers", func(b *testing.B) {
		b.ReportAllocs()
		s, c := newS(b)
		p := &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: "hot", Resource: "r"}, big)}}
		acquire(b, s, p, true)
		c.reset()
		var wg sync.WaitGroup
		per := max(b.N/50, 1)
		for range 50 {
			wg.Go(func() {
				for range per {
					if _, err := s.Acquire(context.Background(), p); err != nil {
						b.Errorf("Acquire() = %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		report(b, c, per*50)
	})
}
