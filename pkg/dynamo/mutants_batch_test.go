package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY batch.go `ms > math.MaxInt64-999` ceilSecond: at ms = MaxInt64−999 both branches give MaxInt64/1000.
// mutant: ARITHMETIC_BASE batch.go `d/2 + rand.N(d/2+1)` backoff: the wait between a batch's tries is timing only; every try decides on what it reads, however long it waited.
// mutant: ARITHMETIC_BASE batch.go `j.used[k] += int64(d.Amount) / scale` count of a charge or a consume: only a compensation has a scale, and it refunds, so their scale is 1 and / and * agree.
// mutant: CONDITIONALS_BOUNDARY batch.go `s.cfg.RejectionCacheSize <= 0` runBatch: NewStore applies WithDefaults, which turns a size of 0 into DefaultRejectionCacheSize, so the store never sees 0.
// mutant: CONDITIONALS_BOUNDARY cache.go `s.cfg.RejectionCacheSize <= 0` rememberRefusal: as in runBatch, the store never sees a size of 0.
// mutant: CONDITIONALS_BOUNDARY cache.go `n > old` learnShards: at n = old the mutant adds the same count again, which changes only its recency in the LRU (which entry a full cache evicts), never a count.
// mutant: CONDITIONALS_BOUNDARY cache.go `n < old` shrinkShards: likewise, only the recency of an equal count.
// mutant: CONDITIONALS_BOUNDARY cache.go `r.untilMs >= until` rememberRefusal: at equal instants the mutant stores the same refusal again; only its recency changes.
// mutant: CONDITIONALS_BOUNDARY cache.go `wait <= 0` rememberRefusal: a refusal with no enforced retry-after is kept until now, which answers no decision (fromRejectionCache wants untilMs > now) and only orders the next plan's writes (gated) for a second; decisions are the same.
// mutant: CONDITIONALS_BOUNDARY cache.go `n <= 1 || a <= 0` mulSat: at n = 1, a·1 is a; at a = 0, 0·n is 0.
// mutant: CONDITIONALS_BOUNDARY cache.go `img.shardCount > 1` fromRejectionCache: at a shard count of 1, mulSat(a, 1) is a.
// mutant: CONDITIONALS_NEGATION cache.go `img.shardCount > 1` fromRejectionCache: amounts not multiplied for a sharded item are smaller, so the cache refuses less and sends more plans to the table, which decides them; the cache never answers what the table would not, and no answer changes.
// mutant: CONDITIONALS_BOUNDARY cache.go `capacity > 0` newLRU: simplelru.NewLRU refuses a capacity of 0, so the cache is disabled either way.

// batchScript runs the bucket items' writes and reads of a store through a
// script: a pause first, then what the call does.
type batchScript struct {
	dynamo.API
	mu      sync.Mutex
	writes  int
	reads   int
	write   func(n int) (pause time.Duration, act string) // act: "", "race", "conflict", "hang", "server", "throttle"
	read    func(n int) time.Duration
	readKey func(pk string) // told of each read of a bucket item
	gets    int
	get     func(n int) (act string) // BatchGetItem n (records): "", "unprocessed", "hang"
}

func (s *batchScript) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	act := ""
	if s.get != nil {
		s.mu.Lock()
		s.gets++
		act = s.get(s.gets)
		s.mu.Unlock()
	}
	switch act {
	case "unprocessed":
		return &dynamodb.BatchGetItemOutput{UnprocessedKeys: in.RequestItems}, nil
	case "hang":
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.API.BatchGetItem(ctx, in, o...)
}

func isBucket(key map[string]types.AttributeValue) bool {
	return strings.Contains(pkOf(key), "/BUCKET#")
}

func pauseCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *batchScript) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !isBucket(in.Key) || s.write == nil {
		return s.API.UpdateItem(ctx, in, o...)
	}
	s.mu.Lock()
	s.writes++
	pause, act := s.write(s.writes)
	s.mu.Unlock()
	if act == "race" {
		time.Sleep(pause) // the other writer's answer comes, deadline or not
	} else if err := pauseCtx(ctx, pause); err != nil {
		return nil, err
	}
	switch act {
	case "race": // another writer got there first: the item as it is
		out, err := s.API.GetItem(context.WithoutCancel(ctx), &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, err
		}
		return nil, &types.ConditionalCheckFailedException{Message: aws.String("raced"), Item: out.Item}
	case "conflict":
		return nil, &types.TransactionConflictException{Message: aws.String("a transaction holds the item")}
	case "hang":
		<-ctx.Done()
		return nil, ctx.Err()
	case "server":
		return nil, serverError()
	case "throttle":
		return nil, throttled()
	}
	return s.API.UpdateItem(ctx, in, o...)
}

func (s *batchScript) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if isBucket(in.Key) && s.readKey != nil {
		s.readKey(pkOf(in.Key))
	}
	if isBucket(in.Key) && s.read != nil {
		s.mu.Lock()
		s.reads++
		pause := s.read(s.reads)
		s.mu.Unlock()
		if err := pauseCtx(ctx, pause); err != nil {
			return nil, err
		}
	}
	return s.API.GetItem(ctx, in, o...)
}

// TestLostRacesThenSilenceIsContention: a batch whose write goes unanswered
// until its budget (Timeout, 100 ms) ends is DynamoDB not answering (an
// error, for ON_UNAVAILABLE), unless most of the budget went on races lost
// to other writers, or on DynamoDB throttling the item, before it: then the
// last call had less than half the budget left, and the refusal is
// contention (a decision, never ON_UNAVAILABLE's).
func TestLostRacesThenSilenceIsContention(t *testing.T) {
	const T = 100 * time.Millisecond
	cases := []struct {
		name      string
		readPause time.Duration
		write     func(n int) (time.Duration, string)
		contended bool // else an error
		fails     bool // Config.ThrottleFails (ON_UNAVAILABLE=local): throttling is a failure
	}{
		{"a race lost over 60 ms, then silence", 0, script(60*time.Millisecond, "race", "hang"), true, false},
		{"a conflict over 60 ms, then silence", 0, script(60*time.Millisecond, "conflict", "hang"), true, false},
		{"a race lost at once, then silence", 0, script(0, "race", "hang"), false, false},
		{"a race lost over exactly half the budget, then silence", 0, script(T/2, "race", "hang"), false, false},
		{"a read of 60 ms, no race, then silence", 60 * time.Millisecond, script(0, "hang", "hang"), false, false},
		{"a race lost over 60 ms, then a server error", 0, script(60*time.Millisecond, "race", "server"), false, false},
		{"throttled over 60 ms, then silence", 0, script(60*time.Millisecond, "throttle", "hang"), true, false},
		{"throttled at once, then silence", 0, script(0, "throttle", "hang"), false, false},
		{"throttled over 60 ms, then silence, where throttling fails", 0, script(60*time.Millisecond, "throttle", "hang"), false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				api := &batchScript{API: fakeTable(t), write: c.write, read: func(int) time.Duration { return c.readPause }}
				obs := &countingObserver{}
				s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: T, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1, ThrottleFails: c.fails}, newClock(), dynamo.WithObserver(obs))
				p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 10, time.Second, 0), Amount: tokenbucket.PerToken}}}
				dec, err := s.Acquire(context.Background(), p)
				switch {
				case c.contended && (err != nil || dec.Admitted || obs.contended.Load() != 1):
					t.Errorf("Acquire() = %+v, %v with %d contended, want refused as contended (no error)", dec, err, obs.contended.Load())
				case !c.contended && (err == nil || !errors.Is(err, dynamo.ErrUnavailable)):
					t.Errorf("Acquire() = %+v, %v, want an error wrapping ErrUnavailable (DynamoDB did not answer)", dec, err)
				}
			})
		})
	}
}

// TestBatchJoinsAnotherBatchsRead: a cold read outlives the batch that
// started it (its budget is a second, the batch's 100 ms); the next batch
// on the item waits for that read rather than start another, and decides
// on the image it leaves in the cache.
func TestBatchJoinsAnotherBatchsRead(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		api := &batchScript{API: fakeTable(t), read: func(n int) time.Duration {
			if n == 1 {
				return 300 * time.Millisecond
			}
			return 0
		}}
		s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: 100 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, newClock())
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 10, time.Second, 0), Amount: tokenbucket.PerToken}}}
		if dec, err := s.Acquire(context.Background(), p); !errors.Is(err, dynamo.ErrUnavailable) {
			t.Fatalf("Acquire() during a 300 ms read = %+v, %v, want ErrUnavailable (DynamoDB did not answer in time)", dec, err)
		}
		time.Sleep(150 * time.Millisecond) // at 250 ms, with the read due at 300
		if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
			t.Errorf("Acquire() joining the read = %+v, %v, want admitted", dec, err)
		}
		api.mu.Lock()
		defer api.mu.Unlock()
		if api.reads != 1 {
			t.Errorf("reads = %d, want 1 (the second batch joins the first's)", api.reads)
		}
	})
}

// TestChargeRacedPastItsBudgetIsContended: a charge whose every write loses
// a race (each a millisecond) is refused as contended once its budget (a
// second) is spent: an answer, not an error, and nothing charged.
func TestChargeRacedPastItsBudgetIsContended(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		api := &batchScript{API: fakeTable(t), write: func(int) (time.Duration, string) { return time.Millisecond, "race" }}
		s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: 100 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, newClock())
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e", Resource: "r"}, Limit: "x", Bucket: mustLimit(t, 10, time.Second, 0), Amount: tokenbucket.PerToken, Op: cascade.Charge}}}
		dec, err := s.Acquire(context.Background(), p)
		if err != nil || dec.Admitted || len(dec.Statuses) != 1 || !dec.Statuses[0].Contended {
			t.Errorf("Acquire(charge, every write raced) = %+v, %v, want refused as contended", dec, err)
		}
	})
}

// TestRefusedShardTriesEachOtherOnce: a decision refused on a shard of an
// item of two tries the other shard, and no more: the clock moves an hour
// on at a third read of the item, which would find a shard full again. Of
// 20 refused decisions, each reads both shards, never one twice.
func TestRefusedShardTriesEachOtherOnce(t *testing.T) {
	clk := newClock()
	var armed atomic.Bool
	var mu sync.Mutex
	var pks []string
	api := &batchScript{API: fakeTable(t)}
	s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: time.Second, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, clk)
	api.readKey = func(pk string) {
		mu.Lock()
		defer mu.Unlock()
		if armed.Load() {
			if pks = append(pks, pk); len(pks) == 3 {
				clk.Advance(time.Hour)
			}
		}
	}
	key := cascade.Key{Entity: "e", Resource: "r"}
	lim := mustLimit(t, 2, time.Hour, 0)
	if err := admin.New(s).SetShards(context.Background(), key, 2, map[string]tokenbucket.Limit{"x": lim}); err != nil {
		t.Fatal(err)
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
	for i := 0; ; i++ {
		dec, err := s.Acquire(context.Background(), p)
		if err != nil || i > 2 {
			t.Fatalf("Acquire() #%d = %+v, %v, want 2 admitted, then refused", i+1, dec, err)
		}
		if !dec.Admitted {
			break
		}
	}
	for i := range 20 {
		mu.Lock()
		pks = nil
		mu.Unlock()
		armed.Store(true)
		if dec, err := s.Acquire(context.Background(), p); err != nil || dec.Admitted {
			t.Fatalf("Acquire() #%d on two empty shards = %+v, %v, want refused", i+1, dec, err)
		}
		mu.Lock()
		got := append([]string(nil), pks...)
		mu.Unlock()
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("Acquire() #%d read %v, want each of the two shards once", i+1, got)
		}
	}
}

// TestRecordReadsThrottledOrSilent: a read of stored limits that DynamoDB
// keeps leaving unprocessed (throughput) ends the decision as contended; one
// that goes unanswered, after an earlier page of it was answered in full,
// is DynamoDB not answering.
func TestRecordReadsThrottledOrSilent(t *testing.T) {
	lim := mustLimit(t, 10, time.Second, 0)
	plan := func(n int) *cascade.Plan {
		p := &cascade.Plan{}
		for i := range n {
			p.Debits = append(p.Debits, cascade.Debit{Key: cascade.Key{Entity: "e" + strconv.Itoa(i), Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken})
		}
		return p
	}
	for _, c := range []struct {
		name      string
		debits    int
		get       func(n int) string
		contended bool
	}{
		{"every key left unprocessed", 1, func(int) string { return "unprocessed" }, true},
		{"a first page answered, the second not", 60, func(n int) string {
			if n == 1 {
				return ""
			}
			return "hang"
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				api := &batchScript{API: fakeTable(t), get: c.get}
				s := newStoreCfg(t, api, dynamo.Config{Table: "t", Timeout: 100 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, newClock())
				dec, err := s.Acquire(context.Background(), plan(c.debits))
				switch {
				case c.contended && (err != nil || dec.Admitted):
					t.Errorf("Acquire() = %+v, %v, want refused as contended", dec, err)
				case !c.contended && !errors.Is(err, dynamo.ErrUnavailable):
					t.Errorf("Acquire() = %+v, %v, want ErrUnavailable", dec, err)
				}
				api.mu.Lock()
				gets := api.gets
				api.mu.Unlock()
				if gets < 2 {
					t.Errorf("BatchGetItem calls = %d, want at least 2", gets)
				}
			})
		})
	}
}

// script returns a write script: the first write does first after pause,
// every later one then.
func script(pause time.Duration, first, then string) func(int) (time.Duration, string) {
	return func(n int) (time.Duration, string) {
		if n == 1 {
			return pause, first
		}
		return 0, then
	}
}

// TestItemTTLExact pins the expiry a write sets: one second past the later
// of a week from now and the moment the highest level the write can leave
// is full again, in whole seconds rounded up, with the clock 1,234 ms past a
// second.
func TestItemTTLExact(t *testing.T) {
	const week = 7 * 24 * 3600
	f := fakeTable(t)
	c := newClock()
	c.Advance(1234 * time.Millisecond)
	s := newStore(t, f, "t", c)
	ttl := func(entity string) int64 {
		t.Helper()
		for _, it := range bucketItems(f) {
			if strings.Contains(pkOf(it), "BUCKET#"+entity+"#") {
				v, err := strconv.ParseInt(it["ttl"].(*types.AttributeValueMemberN).Value, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		t.Fatalf("no bucket item of %s", entity)
		return 0
	}
	take := func(entity string, l tokenbucket.Limit) {
		t.Helper()
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: entity, Resource: "r"}, Limit: "x", Bucket: l, Amount: tokenbucket.PerToken}}}
		if dec, err := s.Acquire(context.Background(), p); err != nil || !dec.Admitted {
			t.Fatalf("Acquire(%s) = %+v, %v", entity, dec, err)
		}
	}
	nowS := c.Now().UnixMilli() / 1000

	// 10 a second: full again within a second, so a week from now.
	take("fast", mustLimit(t, 10, time.Second, 0))
	if got, want := ttl("fast"), nowS+week+1; got != want {
		t.Errorf("ttl of a 10/s bucket = %d, want %d (now %d s + a week + 1)", got, want, nowS)
	}

	// 10 in 30 days: a new bucket that gave one is full again in 3 days,
	// so a week; a stored one, which may have held just the one token the
	// write takes, in 30 days.
	month := mustLimit(t, 10, 30*24*time.Hour, 0)
	take("slow", month)
	if got, want := ttl("slow"), nowS+week+1; got != want {
		t.Errorf("ttl of a new 10/30d bucket = %d, want %d", got, want)
	}
	c.Advance(time.Second)
	take("slow", month)
	fullMs := c.Now().Add(30 * 24 * time.Hour).UnixMilli()
	if got, want := ttl("slow"), (fullMs+999)/1000+1; got != want {
		t.Errorf("ttl of a stored 10/30d bucket = %d, want %d (full again in 30 days at most, rounded up, + 1)", got, want)
	}
}

// TestBatchedDepthAndCallContext: a write reports the least depth of the
// debits it carries (a parent's write is counted apart), and a
// WithCallContext hook gets the contexts of the decisions a write serves.
func TestBatchedDepthAndCallContext(t *testing.T) {
	type key struct{}
	var seen atomic.Int64
	obs := &countingObserver{}
	s := newStore(t, fakeTable(t), "t", newClock(), dynamo.WithObserver(obs), dynamo.WithCallContext(func(call context.Context, decisions []context.Context) context.Context {
		for _, d := range decisions {
			if d.Value(key{}) == "mine" {
				seen.Add(1)
			}
		}
		return call
	}))
	lim := mustLimit(t, 10, time.Second, 0)
	ctx := context.WithValue(context.Background(), key{}, "mine")
	for _, depth := range []int{0, 2} {
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e" + strconv.Itoa(depth), Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken, Depth: uint8(depth)}}}
		if dec, err := s.Acquire(ctx, p); err != nil || !dec.Admitted {
			t.Fatalf("Acquire(depth %d) = %+v, %v", depth, dec, err)
		}
	}
	if w, pw := obs.writes.Load(), obs.parentWrites.Load(); w != 2 || pw != 1 {
		t.Errorf("writes = %d, of a parent = %d, want 2 and 1", w, pw)
	}
	// e0's image is cached: a decision on it makes one call, the write.
	seen.Store(0)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e0", Resource: "r"}, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
	if dec, err := s.Acquire(ctx, p); err != nil || !dec.Admitted {
		t.Fatalf("Acquire(e0 again) = %+v, %v", dec, err)
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("the hook saw the decision's context on %d calls of a decision on a cached image, want 1 (its write)", n)
	}
}

// cachedImageAges are ages of the image a replica holds of an item, on
// either side of a second (the most a refusal or a settlement decides on
// without reading the item again), each with the reads a decision on it
// makes.
var cachedImageAges = []struct {
	age   time.Duration
	reads int
}{{time.Millisecond, 0}, {time.Second, 0}, {time.Second + time.Millisecond, 1}}

// TestRefusalOnCachedImage: with the rejection cache on, a refusal decided
// on the image this replica wrote stands without a read while the image is
// at most a second (maxRejection) old; an older image is read again.
func TestRefusalOnCachedImage(t *testing.T) {
	for _, c := range cachedImageAges {
		t.Run(c.age.String(), func(t *testing.T) {
			f := fakeTable(t)
			clk := newClock()
			s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, ShardWriteRate: -1}, clk)
			lim := mustLimit(t, 10, time.Hour, 0)
			key := cascade.Key{Entity: "e", Resource: "r"}
			all := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: 10 * tokenbucket.PerToken}}}
			if dec, err := s.Acquire(context.Background(), all); err != nil || !dec.Admitted {
				t.Fatalf("Acquire(all 10) = %+v, %v", dec, err)
			}
			before := f.Calls("GetItem")
			clk.Advance(c.age)
			one := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
			if dec, err := s.Acquire(context.Background(), one); err != nil || dec.Admitted {
				t.Fatalf("Acquire(1) = %+v, %v, want refused", dec, err)
			}
			if got := f.Calls("GetItem") - before; got != c.reads {
				t.Errorf("reads for a refusal on an image %v old = %d, want %d", c.age, got, c.reads)
			}
		})
	}
}

// TestShorterRefusalKeepsLongerOne: a refusal with a short retry-after
// (100 ms, of a limit another replica drained) does not cut short the
// rejection cache's answer for an earlier refusal of the same item that
// lasts a second: 500 ms on, a plan the earlier refusal covers is refused
// from the cache, without DynamoDB.
func TestShorterRefusalKeepsLongerOne(t *testing.T) {
	f := fakeTable(t)
	clk := newClock()
	obs := &countingObserver{}
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: time.Second, ShardWriteRate: -1}, clk, dynamo.WithObserver(obs))
	other := newStore(t, f, "t", clk)
	key := cascade.Key{Entity: "e", Resource: "r"}
	hourly, fast := mustLimit(t, 1, time.Hour, 0), mustLimit(t, 1, 100*time.Millisecond, 0)
	x := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: hourly, Amount: tokenbucket.PerToken}}}
	y := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "y", Bucket: fast, Amount: tokenbucket.PerToken}}}
	want := func(s *dynamo.Store, p *cascade.Plan, admitted bool) {
		t.Helper()
		if dec, err := s.Acquire(context.Background(), p); err != nil || dec.Admitted != admitted {
			t.Fatalf("Acquire(%s) = %+v, %v, want admitted %t", p.Debits[0].Limit, dec, err, admitted)
		}
	}
	want(s, x, true)
	want(s, x, false) // refused for an hour: the cache answers for a second
	clk.Advance(5 * time.Millisecond)
	want(other, y, true) // y drained behind s's back
	clk.Advance(5 * time.Millisecond)
	want(s, y, false) // refused by the table, retry after 100 ms
	clk.Advance(490 * time.Millisecond)
	before := obs.hits.Load()
	want(s, x, false)
	if obs.hits.Load() != before+1 {
		t.Errorf("x 500 ms after its refusal: rejection cache hits %d → %d, want one more (the refusal of y must not shorten x's)", before, obs.hits.Load())
	}
}

// TestCacheSizeZeroKeepsDefault: WithCacheSize(n ≤ 0) keeps each cache at
// DefaultCacheSize.
func TestCacheSizeZeroKeepsDefault(t *testing.T) {
	for _, n := range []int{0, -1} {
		s := newStore(t, fakeTable(t), "t", newClock(), dynamo.WithCacheSize(n))
		for _, st := range s.CacheStats() {
			if st.Name != dynamo.CacheRejection && st.Capacity != dynamo.DefaultCacheSize {
				t.Errorf("WithCacheSize(%d): %s capacity %d, want %d", n, st.Name, st.Capacity, dynamo.DefaultCacheSize)
			}
		}
	}
}

// TestNoDoublingPastMaxShards: a throttled item of MaxShards shards is not
// doubled again.
func TestNoDoublingPastMaxShards(t *testing.T) {
	f := fakeTable(t)
	obs := &countingObserver{}
	s := newStoreCfg(t, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond, RejectionCacheSize: dynamo.RejectionCacheOff, ShardWriteRate: -1}, newClock(), dynamo.WithObserver(obs))
	key := cascade.Key{Entity: "e", Resource: "r"}
	lim := mustLimit(t, 1000, time.Second, 0)
	if err := admin.New(s).SetShards(context.Background(), key, dynamo.MaxShards, map[string]tokenbucket.Limit{"x": lim}); err != nil {
		t.Fatal(err)
	}
	var beyond atomic.Int64
	f.SetFailItem(func(op, pk string) error {
		if op == "UpdateItem" && isShard(pk, dynamo.MaxShards) {
			beyond.Add(1)
		}
		return nil
	})
	throttleWrites(f, 1_000_000)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "x", Bucket: lim, Amount: tokenbucket.PerToken}}}
	_, _ = s.Acquire(context.Background(), p)
	if n := beyond.Load(); n != 0 || obs.doublings.Load() != 0 {
		t.Errorf("writes of shard MaxShards = %d, doublings %d on an item of MaxShards shards, want none", n, obs.doublings.Load())
	}
}

// TestRejectionCacheAnswers pins what the rejection cache answers, with a
// store whose cache is on: a refusal until its retry-after (a second at
// most) and not from that instant on; statuses from each limit's own level;
// the same limit twice in a plan counted twice; and never a check.
func TestRejectionCacheAnswers(t *testing.T) {
	key := cascade.Key{Entity: "e", Resource: "r"}
	setup := func(t *testing.T) (*dynamo.Store, *clock, *countingObserver) {
		clk := newClock()
		obs := &countingObserver{}
		s := newStoreCfg(t, fakeTable(t), dynamo.Config{Table: "t", Timeout: time.Second, ShardWriteRate: -1}, clk, dynamo.WithObserver(obs))
		return s, clk, obs
	}
	ask := func(t *testing.T, s *dynamo.Store, debits ...cascade.Debit) cascade.Decision {
		t.Helper()
		dec, err := s.Acquire(context.Background(), &cascade.Plan{Debits: debits})
		if err != nil {
			t.Fatal(err)
		}
		return dec
	}
	hourly := mustLimit(t, 1, time.Hour, 0)
	ten := mustLimit(t, 10, time.Hour, 0)
	x := func(amount tokenbucket.Millitokens) cascade.Debit {
		return cascade.Debit{Key: key, Limit: "x", Bucket: hourly, Amount: amount}
	}

	t.Run("until the retry-after", func(t *testing.T) {
		s, clk, obs := setup(t)
		ask(t, s, x(tokenbucket.PerToken))
		ask(t, s, x(tokenbucket.PerToken)) // refused for an hour: cached for a second
		clk.Advance(999 * time.Millisecond)
		ask(t, s, x(tokenbucket.PerToken))
		if obs.hits.Load() != 1 {
			t.Fatalf("hits = %d at 999 ms, want 1", obs.hits.Load())
		}
		clk.Advance(time.Millisecond)
		ask(t, s, x(tokenbucket.PerToken))
		if obs.hits.Load() != 1 {
			t.Errorf("hits = %d at 1 s, want still 1 (the table asked)", obs.hits.Load())
		}
	})
	t.Run("statuses per limit", func(t *testing.T) {
		s, _, obs := setup(t)
		y := cascade.Debit{Key: key, Limit: "y", Bucket: ten, Amount: tokenbucket.PerToken}
		ask(t, s, x(tokenbucket.PerToken), y)
		ask(t, s, x(tokenbucket.PerToken), y)
		dec := ask(t, s, x(tokenbucket.PerToken), y)
		if obs.hits.Load() != 1 || dec.Statuses[0].OK || !dec.Statuses[1].OK || dec.Statuses[1].Remaining != 9*tokenbucket.PerToken {
			t.Errorf("from the cache: %+v with %d hits, want x refused, y OK with 9 tokens, 1 hit", dec, obs.hits.Load())
		}
	})
	t.Run("the same limit twice", func(t *testing.T) {
		s, _, obs := setup(t)
		two := cascade.Debit{Key: key, Limit: "z", Bucket: mustLimit(t, 3, time.Hour, 0), Amount: tokenbucket.PerToken}
		ask(t, s, two, two)        // 1 left
		ask(t, s, two, two)        // refused: 2 asked
		dec := ask(t, s, two, two) // from the cache
		if obs.hits.Load() != 1 || dec.Admitted {
			t.Errorf("two debits of z holding 1: %+v with %d hits, want refused from the cache", dec, obs.hits.Load())
		}
	})
	t.Run("a check asks the table", func(t *testing.T) {
		s, _, obs := setup(t)
		ask(t, s, cascade.Debit{Key: key, Limit: "x", Bucket: hourly, Amount: 3 * tokenbucket.PerToken, Op: cascade.Charge}) // into debt
		ask(t, s, x(tokenbucket.PerToken))
		before := obs.hits.Load()
		dec := ask(t, s, x(0))
		if obs.hits.Load() != before {
			t.Errorf("a check (%+v) was answered from the rejection cache, want the table asked", dec)
		}
	})
}
