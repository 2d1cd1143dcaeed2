package dynamo_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestHotShardedWritesPaced: four replicas, 20 callers each, ask about
// three times the limit of a bucket of four shards, with DynamoDB's
// latencies. Every replica writing every shard as soon as a decision
// arrives, races lost to the others included, made 0.92 UpdateItem a
// decision; paced, each replica on a home shard of its own, claiming what
// the others likely left, it makes about 0.05 (at most 0.08 here). The
// fleet never admits more than the bucket holds, and admits most of it.
func TestHotShardedWritesPaced(t *testing.T) {
	const replicas, callers, rate = 4, 20, 2000
	inBubble(t, func(t *testing.T) {
		r := newHotRig(t, 3, replicas, 4, rate, 50*time.Millisecond)
		f, stores, p := r.f, r.stores, r.plan
		start := time.Now()
		const run, from = 3 * time.Second, time.Second
		var decided, admitted, counted atomic.Int64
		var wg sync.WaitGroup
		for _, s := range stores {
			for range callers {
				wg.Go(func() {
					for time.Since(start) < run {
						dec, err := s.Acquire(context.Background(), p)
						if err == nil && dec.Admitted {
							admitted.Add(1)
						}
						if time.Since(start) >= from {
							counted.Add(1)
						}
						decided.Add(1)
						time.Sleep(time.Millisecond) // a caller's pause: the bubble's time moves on
					}
				})
			}
		}
		time.Sleep(from)
		writes0 := f.Calls("UpdateItem")
		wg.Wait()
		writes := f.Calls("UpdateItem") - writes0
		per := float64(writes) / float64(counted.Load())
		allowed := float64(rate) * (1 + time.Since(start).Seconds()) // the burst and the refill
		t.Logf("%d decisions, %d admitted of %.0f allowed; from %v: %d UpdateItem for %d decisions (%.4f each)",
			decided.Load(), admitted.Load(), allowed, from, writes, counted.Load(), per)
		if per > 0.08 {
			t.Errorf("%.4f UpdateItem a decision on a hot sharded bucket, want at most 0.08", per)
		}
		if got := float64(admitted.Load()); got > allowed || got < 0.9*allowed {
			t.Errorf("admitted %.0f, want at most the %.0f allowed and at least 0.9 of it", got, allowed)
		}
	})
}

// TestHotShardedAloneNotPaced: one replica, 64 callers, on a hot bucket
// of two shards that never refuses, with a budget of a second. Paced, its
// lane started a write once every third of a second (a pace is a third of
// the budget), and 64 decisions waited for each: under 200 decisions a
// second, each waiting about 340 ms, where the same replica made 12,000 a
// second before the bucket doubled (DynamoDB Local, 64 callers). Alone on
// its shard, no other writer to spare, it writes as fast as DynamoDB
// answers.
func TestHotShardedAloneNotPaced(t *testing.T) {
	const callers, run = 64, 2 * time.Second
	inBubble(t, func(t *testing.T) {
		r := newHotRig(t, 7, 1, 2, 1_000_000_000, time.Second)
		start := time.Now()
		var decided, slow atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for time.Since(start) < run {
					at := time.Now()
					dec, err := r.stores[0].Acquire(context.Background(), r.plan)
					if err != nil || !dec.Admitted {
						t.Errorf("Acquire() = %+v, %v on a bucket that never refuses", dec, err)
						return
					}
					decided.Add(1)
					if time.Since(at) >= 100*time.Millisecond {
						slow.Add(1)
					}
				}
			})
		}
		wg.Wait()
		perSec := float64(decided.Load()) / time.Since(start).Seconds()
		t.Logf("%d decisions (%.0f a second), %d of them waited 100 ms or more", decided.Load(), perSec, slow.Load())
		if perSec < 2000 || slow.Load()*10 > decided.Load() {
			t.Errorf("%.0f decisions a second, %d of %d waiting 100 ms or more: a lone replica's writes were paced", perSec, slow.Load(), decided.Load())
		}
	})
}

// TestHotShardedPacedUntilAlone: two replicas, 32 callers each, share a
// hot bucket of two shards that never refuses, with a budget of a second:
// each paces its writes while it finds the other's decisions on its home
// shard (one start a shard every third of a second: 144–2,700 decisions a
// second over 10 runs, as the replicas' homes meet or miss). Then one
// stops; a second after the one left last saw the other's decisions, it
// writes as fast as DynamoDB answers again (about 2,750 a second in every
// run), not paced.
func TestHotShardedPacedUntilAlone(t *testing.T) {
	const callers = 32
	inBubble(t, func(t *testing.T) {
		r := newHotRig(t, 11, 2, 2, 1_000_000_000, time.Second)
		var decided [2]atomic.Int64
		var stop [2]atomic.Bool
		var wg sync.WaitGroup
		for i, s := range r.stores {
			for range callers {
				wg.Go(func() {
					for !stop[i].Load() {
						if dec, err := s.Acquire(context.Background(), r.plan); err != nil || !dec.Admitted {
							t.Errorf("Acquire() = %+v, %v on a bucket that never refuses", dec, err)
							return
						}
						decided[i].Add(1)
					}
				})
			}
		}
		rate := func(d time.Duration) float64 {
			before := decided[0].Load()
			time.Sleep(d)
			return float64(decided[0].Load()-before) / d.Seconds()
		}
		time.Sleep(time.Second)
		shared := rate(2 * time.Second)
		stop[1].Store(true)
		time.Sleep(2 * time.Second) // the other's last batches, then a second without them
		alone := rate(2 * time.Second)
		stop[0].Store(true)
		wg.Wait()
		t.Logf("replica 0: %.0f decisions a second sharing the bucket, %.0f alone", shared, alone)
		if alone < 2000 {
			t.Errorf("%.0f decisions a second alone on the bucket: still paced", alone)
		}
	})
}

// TestHotShardRefusalStaysOnItsShard: a repayment lands on shard 0 of a
// hot bucket of four and leaves it owing eight seconds of its refill; the
// other three shards are full. A replica's refusal on shard 0 was its
// rejection cache's for up to a second, and answered every decision on
// that image though its home had moved on: the replica admitted 0.22 of
// the limit from 1 s to 3 s. A refusal on a shard now answers only the
// decisions bound for that shard, and the replica admits what shards 1 to
// 3 hold (their burst and refill: at most 3/4 of the limit over the run
// and a second's burst), about 1.0 of the limit from 1 s to 3 s.
func TestHotShardRefusalStaysOnItsShard(t *testing.T) {
	const callers, rate = 100, 2000
	inBubble(t, func(t *testing.T) {
		hr := newHotRig(t, 5, 1, 4, rate, 50*time.Millisecond)
		s, p := hr.stores[0], hr.plan
		r := repayment("r1", time.Now().UnixMicro(), hr.key, hr.lim, 4000*tokenbucket.PerToken)
		if _, err := s.Repay(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		const run, from = 3 * time.Second, time.Second
		var all, admitted atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for time.Since(start) < run {
					dec, err := s.Acquire(context.Background(), p)
					if err == nil && dec.Admitted {
						all.Add(1)
						if time.Since(start) >= from {
							admitted.Add(1)
						}
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		got := float64(admitted.Load()) / (rate * (run - from).Seconds())
		held := 0.75 * rate * (1 + time.Since(start).Seconds())
		t.Logf("admitted %d, %d from %v: %.2f of the limit; shards 1 to 3 held %.0f", all.Load(), admitted.Load(), from, got, held)
		if got < 0.6 {
			t.Errorf("admitted %.2f of the limit from %v, want what shards 1 to 3 hold (at least 0.6)", got, from)
		}
		if float64(all.Load()) > held {
			t.Errorf("admitted %d, more than the %.0f shards 1 to 3 held", all.Load(), held)
		}
	})
}

// hotRig is a bucket of shards shards of rate a second (burst a second's
// worth) on the fake table with DynamoDB's latencies (seeded), written by
// replicas stores with budget timeout; plan debits one token of it.
type hotRig struct {
	f      *dynamotest.Fake
	stores []*dynamo.Store
	key    cascade.Key
	lim    tokenbucket.Limit
	plan   *cascade.Plan
}

func newHotRig(t *testing.T, seed uint64, replicas, shards int, rate uint64, timeout time.Duration) hotRig {
	t.Helper()
	return newHotRigOf(t, seed, replicas, shards, mustLimit(t, rate, time.Second, 0), timeout)
}

// newHotRigOf is newHotRig on a bucket of limit lim.
func newHotRigOf(t *testing.T, seed uint64, replicas, shards int, lim tokenbucket.Limit, timeout time.Duration) hotRig {
	t.Helper()
	r := hotRig{f: fakeTable(t), key: cascade.Key{Entity: "hot", Resource: "api"}, lim: lim}
	o := dynamotest.LikeDynamoDB()
	o.Seed = seed
	r.f.SetOptions(o)
	r.plan = &cascade.Plan{Debits: []cascade.Debit{{Key: r.key, Limit: "p", Bucket: r.lim, Amount: tokenbucket.PerToken}}}
	for range replicas {
		s, err := dynamo.NewStore(context.Background(), r.f, dynamo.Config{Table: "t", Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		r.stores = append(r.stores, s)
	}
	if err := admin.New(r.stores[0]).SetShards(context.Background(), r.key, shards, map[string]tokenbucket.Limit{"p": r.lim}); err != nil {
		t.Fatal(err)
	}
	return r
}

// shardWrites counts one replica's UpdateItems on a hot bucket's shards.
type shardWrites struct {
	dynamo.API
	mu sync.Mutex
	by map[string]int // by item
}

func (w *shardWrites) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if pk := pkOf(in.Key); strings.Contains(pk, "/BUCKET#") {
		w.mu.Lock()
		w.by[pk]++
		w.mu.Unlock()
	}
	return w.API.UpdateItem(ctx, in, o...)
}

// TestHotShardedHomesByRank: eight replicas that beat the fleet record
// share a hot bucket of four shards. Each writes one shard only, its rank
// among the live replicas modulo four, so that every shard keeps the same
// two writers (homes that moved every 125 ms put a replica on a shard it
// last wrote half a second before, to read it again and race writers it
// had not learned). Every shard is written, and the fleet admits what the
// bucket holds, no more.
func TestHotShardedHomesByRank(t *testing.T) {
	const replicas, shards, callers, rate = 8, 4, 10, 2000
	inBubble(t, func(t *testing.T) {
		r, stores, counts := rankedFleet(t, replicas, shards, mustLimit(t, rate, time.Second, 0))
		start := time.Now()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for _, s := range stores {
			for range callers {
				wg.Go(func() {
					for time.Since(start) < 3*time.Second {
						if dec, err := s.Acquire(context.Background(), r.plan); err == nil && dec.Admitted {
							admitted.Add(1)
						}
						time.Sleep(time.Millisecond)
					}
				})
			}
		}
		wg.Wait()
		written := map[string]int{}
		for i, w := range counts {
			w.mu.Lock()
			home, away := 0, 0
			for pk, n := range w.by {
				if isShard(pk, i%shards) {
					home += n
				} else {
					away += n
				}
				written[pk] += n
			}
			w.mu.Unlock()
			// Before the bucket is hot, and its shards known, the first
			// writes go to shard 0; until a window of what the replica
			// asks is measured (askWindow), its home moves.
			if away*3 > home || home < 20 {
				t.Errorf("replica r%d (rank %d) wrote %v; want its home, shard %d, only, after its first few", i, i, w.by, i%shards)
			}
		}
		allowed := float64(rate) * (1 + time.Since(start).Seconds())
		t.Logf("admitted %d of %.0f allowed; writes by shard %v", admitted.Load(), allowed, written)
		if got := float64(admitted.Load()); got > allowed || got < 0.9*allowed {
			t.Errorf("admitted %.0f, want at most the %.0f allowed and at least 0.9 of it", got, allowed)
		}
	})
}

// rankedFleet starts replicas stores on a bucket of lim pre-sharded to
// shards, on a fake with DynamoDB's latencies and no throttling (so no
// doubling), each counting its writes by shard and writing at any rate
// (ShardWriteRate -1); each beats the fleet record twice, so that it knows
// its rank among all of them.
func rankedFleet(t *testing.T, replicas, shards int, lim tokenbucket.Limit) (hotRig, []*dynamo.Store, []*shardWrites) {
	t.Helper()
	r := newHotRigOf(t, 5, 1, shards, lim, 50*time.Millisecond)
	o := dynamotest.LikeDynamoDB()
	o.Seed, o.Throughput = 5, dynamotest.Throughput{}
	r.f.SetOptions(o)
	var stores []*dynamo.Store
	var counts []*shardWrites
	for range replicas {
		w := &shardWrites{API: r.f, by: map[string]int{}}
		s, err := dynamo.NewStore(context.Background(), w, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, ShardWriteRate: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores, counts = append(stores, s), append(counts, w)
	}
	for range 2 { // the second round counts every replica
		for i, s := range stores {
			if _, _, err := s.Heartbeat(context.Background(), fmt.Sprintf("r%d", i), time.Minute, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r, stores, counts
}

// TestHotShardedHomesFollowDemand: ten replicas that beat the fleet record
// ask a bucket of four shards, 2,250 a second, 1.11 times its limit: 250
// decisions a second each (after a first second at twice that, which
// empties the bucket). Homes by rank would give two shards three writers
// and two shards two: those two would be asked 500 a second of the 562
// each refills, and the fleet would admit about 0.94 of the limit. Each
// replica asks 0.11 of the limit, and the fewest writers of a shard, two,
// would ask 0.89 of its share, under the 1.25 that fixed homes need
// (homeDemand): homes keep moving, each replica writes every shard, and
// over the 8 s that follow the fleet admits at least 0.97 of the refill.
func TestHotShardedHomesFollowDemand(t *testing.T) {
	const replicas, shards, rate = 10, 4, 2250
	const from, to = 1500 * time.Millisecond, 9500 * time.Millisecond
	inBubble(t, func(t *testing.T) {
		lim := mustLimit(t, rate, time.Second, 0)
		r, stores, counts := rankedFleet(t, replicas, shards, lim)
		start := time.Now()
		var measured, all atomic.Int64
		var wg sync.WaitGroup
		for _, s := range stores {
			wg.Go(func() {
				for at := time.Since(start); at < to; at = time.Since(start) {
					wg.Go(func() {
						if dec, err := s.Acquire(context.Background(), r.plan); err == nil && dec.Admitted {
							all.Add(1)
							if at >= from {
								measured.Add(1)
							}
						}
					})
					if at < time.Second {
						time.Sleep(2 * time.Millisecond)
					} else {
						time.Sleep(4 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		for i, w := range counts {
			w.mu.Lock()
			if len(w.by) < shards {
				t.Errorf("replica r%d wrote %v; want every shard (homes that move)", i, w.by)
			}
			w.mu.Unlock()
		}
		refill := rate * (to - from).Seconds()
		if got, most := float64(all.Load()), rate*(1+time.Since(start).Seconds()); got > most {
			t.Errorf("admitted %.0f over the run, more than the %.0f allowed", got, most)
		}
		t.Logf("admitted %d asked from %v to %v, of %.0f refilled", measured.Load(), from, to, refill)
		if got := float64(measured.Load()); got < 0.97*refill {
			t.Errorf("admitted %.0f from %v to %v, want at least 0.97 of the %.0f refilled", got, from, to, refill)
		}
	})
}

// raceOnce, once armed, runs take on the bucket item of the first write
// the store it wraps sends there (another replica's write landing first),
// and counts the writes to bucket items from then on.
type raceOnce struct {
	dynamo.API
	mu     sync.Mutex
	take   func(pk string)
	writes map[string]int
}

func (r *raceOnce) arm(take func(pk string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.take, r.writes = take, map[string]int{}
}

func (r *raceOnce) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	pk := pkOf(in.Key)
	var take func(string)
	r.mu.Lock()
	if r.writes != nil && strings.Contains(pk, "/BUCKET#") {
		r.writes[pk]++
		take, r.take = r.take, nil
	}
	r.mu.Unlock()
	if take != nil {
		take(pk)
	}
	return r.API.UpdateItem(ctx, in, o...)
}

// TestHotShardNoSecondRace: a replica's batch of six decisions on its
// home shard of a crowded hot bucket, full on its image, loses its race
// to another replica's write. When that write left the shard three
// tokens, the batch is refused, contended, with no second write: decided
// again on the image DynamoDB returned, it wrote for one of them (half of
// three, the claim's margin), against writers that took the rest a moment
// before, each race a write billed; the three stay in the shard for the
// next batch. When it left eight, the batch is decided again and written,
// claiming half of them (four), as on any image: on the image just
// returned it claimed all six, leaving no margin for the next writer.
func TestHotShardNoSecondRace(t *testing.T) {
	pk0 := item.BucketPK("default", "hot", "api", 0)
	for _, tc := range []struct {
		left                int64
		admitted, contended int64
		writes              int
	}{
		{left: 3, admitted: 0, contended: 6, writes: 1},
		{left: 8, admitted: 4, contended: 2, writes: 2},
	} {
		t.Run(fmt.Sprintf("%d left", tc.left), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				admitted, contended, writes := raceOnHotShard(t, tc.left)
				if admitted != tc.admitted || contended != tc.contended || len(writes) != 1 || writes[pk0] != tc.writes {
					t.Errorf("after a race lost to a write that left %d tokens: %d admitted, %d contended, writes %v; want %d, %d and %d writes of shard 0",
						tc.left, admitted, contended, writes, tc.admitted, tc.contended, tc.writes)
				}
			})
		})
	}
}

// raceOnHotShard runs TestHotShardNoSecondRace's race, the other
// replica's write leaving left tokens in the shard, and returns what the
// six decisions were and the writes to bucket items they made.
func raceOnHotShard(t *testing.T, left int64) (admitted, contended int64, writes map[string]int) {
	ctx := context.Background()
	f := fakeTable(t) // no latency: the race's outcome does not hang on a draw's refill
	key := cascade.Key{Entity: "hot", Resource: "api"}
	// 10 tokens a shard, refilled in 100 ms: full again when the batch
	// of six is decided a pace (16.7 ms) after the last write.
	lim := mustLimit(t, 20, 100*time.Millisecond, 0)
	plan := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "p", Bucket: lim, Amount: tokenbucket.PerToken}}}
	other, err := dynamo.NewStore(ctx, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	if err := admin.New(other).SetShards(ctx, key, 2, map[string]tokenbucket.Limit{"p": lim}); err != nil {
		t.Fatal(err)
	}
	w := &raceOnce{API: f}
	s, err := dynamo.NewStore(ctx, w, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// Four live replicas, twice the shards, "a" first: this one's home is
	// shard 0.
	for _, id := range []string{"x", "y", "z"} {
		if _, _, err := other.Heartbeat(ctx, id, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Heartbeat(ctx, "a", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if dec, err := s.Acquire(ctx, plan); err != nil || !dec.Admitted {
		t.Fatalf("first Acquire() = %+v, %v; want admitted", dec, err)
	}
	s.MarkCrowded(key)
	if dec, err := s.Acquire(ctx, plan); err != nil || !dec.Admitted || dec.Statuses[0].Shard != 0 {
		t.Fatalf("Acquire() on the hot bucket = %+v, %v; want admitted on shard 0", dec, err)
	}
	w.arm(func(pk string) {
		// Another replica's write lands first and leaves the shard left
		// tokens (a shard of 2 holds half of the level).
		x := time.Now().UnixMilli()*int64(lim.RefillAmount) - left*2*int64(tokenbucket.PerToken)*lim.RefillPeriod.Milliseconds()
		if _, err := f.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String("t"), Key: item.Key(pk, item.SKState),
			UpdateExpression:          aws.String("SET #x = :x"),
			ExpressionAttributeNames:  map[string]string{"#x": item.LimitPrefix("p") + "_" + item.FieldLevel},
			ExpressionAttributeValues: map[string]types.AttributeValue{":x": item.NumAV(x)},
		}); err != nil {
			t.Errorf("the other replica's write: %v", err)
		}
	})
	var wg sync.WaitGroup
	var ok, busy atomic.Int64
	for range 6 {
		wg.Go(func() {
			dec, err := s.Acquire(ctx, plan)
			switch {
			case err != nil:
				t.Errorf("Acquire() = %v", err)
			case dec.Admitted:
				ok.Add(1)
			case dec.Statuses[0].Contended:
				busy.Add(1)
			}
		})
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return ok.Load(), busy.Load(), w.writes
}
