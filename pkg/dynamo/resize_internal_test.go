package dynamo

import (
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestLoadsCount steps one bucket's measure through a hot window (a
// doubling at ShardWriteRate per shard, once until done), a busy window
// that is not calm, and idle windows (a merge after ShardMergeAfter).
func TestLoadsCount(t *testing.T) {
	c := Config{ShardWriteRate: 100, ShardMergeRate: 10, ShardMergeAfter: time.Minute}
	l := writeRates{m: newLRU[*writeRate]("load", 10)}
	for i := 1; i < 100; i++ {
		if to := l.count("b", 1, 0, c); to != 1 {
			t.Fatalf("write %d of a window at 100/s per shard: count = %d, want 1", i, to)
		}
	}
	if to := l.count("b", 1, 0, c); to != 2 {
		t.Fatalf("write 100 of a window at 100/s per shard: count = %d, want 2", to)
	}
	if to := l.count("b", 1, 0, c); to != 1 {
		t.Fatalf("write 101, a doubling under way: count = %d, want 1", to)
	}
	l.done("b", 0)
	for i := 1; i < 200; i++ { // 2 shards: 200 writes a window
		if to := l.count("b", 2, 500, c); to != 2 {
			t.Fatalf("write %d of a window on 2 shards: count = %d, want 2", i, to)
		}
	}
	steps := []struct {
		atMs int64
		want int
	}{
		{1000, 2},   // closes a window of 199 writes: busy, not calm
		{2000, 2},   // closes a window of 1 write: calm since 1000
		{60000, 2},  // 59 s calm
		{61000, 1},  // 60 s calm: merge
		{61001, 2},  // under way
		{200000, 2}, // still under way: nothing until done
	}
	for _, st := range steps {
		if to := l.count("b", 2, st.atMs, c); to != st.want {
			t.Errorf("write at %d ms on 2 shards: count = %d, want %d", st.atMs, to, st.want)
		}
	}
	off := Config{ShardWriteRate: -1, ShardMergeRate: -1, ShardMergeAfter: time.Minute}
	for i := range 1000 {
		if to := l.count("c", 2, int64(i)*100000, off); to != 2 {
			t.Fatalf("write %d with both rates off: count = %d, want 2", i, to)
		}
	}
}

// TestShardShare rounds a shard's share toward −∞, in debt too.
func TestShardShare(t *testing.T) {
	for _, c := range []struct{ t, n, want int64 }{{10, 4, 2}, {12, 4, 3}, {-1, 4, -1}, {-4, 4, -1}, {-5, 4, -2}, {0, 2, 0}, {7, 1, 7}} {
		if got := shardShare(tokenbucket.Millitokens(c.t), int(c.n)); got != tokenbucket.Millitokens(c.want) {
			t.Errorf("shardShare(%d, %d) = %d, want %d", c.t, c.n, got, c.want)
		}
	}
}

// TestRehome moves a part off a removed shard to one of the count learned
// since: a give-back's amounts, multiplied for the count it was taken on
// (4), are multiplied for the new one (2) instead, so it gives back the
// same share of the whole bucket; a decision's part is multiplied when it
// is decided, and keeps its amounts.
func TestRehome(t *testing.T) {
	s := &Store{caches: newCaches(10, 10)}
	b := bucket{key: cascade.Key{Entity: "e", Resource: "r"}, ns: "default", base: "b"}
	cacher{s}.learnShards(b.base, 4)
	cacher{s}.shrinkShards(b.base, 2)
	give := &part{kind: giveBackPart, b: b, scale: 4, debits: []cascade.Debit{{Amount: 4 * 333}, {Amount: 4 * tokenbucket.PerToken}}}
	give.choose(3)
	s.rehome(give)
	if give.scale != 2 || give.debits[0].Amount != 2*333 || give.debits[1].Amount != 2*tokenbucket.PerToken {
		t.Errorf("rehome(give-back of 4 shards) on 2 = scale %d, amounts %d and %d, want 2, %d and %d",
			give.scale, give.debits[0].Amount, give.debits[1].Amount, 2*333, 2*tokenbucket.PerToken)
	}
	if give.shard >= 2 || give.pk != b.pk(give.shard) {
		t.Errorf("rehome(give-back) = shard %d (%s), want a shard below 2", give.shard, give.pk)
	}
	dec := &part{b: b, debits: []cascade.Debit{{Amount: 333}}}
	dec.choose(3)
	s.rehome(dec)
	if dec.scale != 0 || dec.debits[0].Amount != 333 || dec.shard >= 2 {
		t.Errorf("rehome(decision) = scale %d, amount %d, shard %d, want 0, 333, below 2", dec.scale, dec.debits[0].Amount, dec.shard)
	}
}

// TestIdleShards: at 10 writes a second (a gap of 200 ms), a shard whose
// last two writes came closer than the gap, the last within it, is busy;
// one whose writes are a gap apart, or whose last write is a gap old, or
// whose two clocks are equal (its first write), is idle.
func TestIdleShards(t *testing.T) {
	s := &Store{cfg: Config{ShardMergeRate: 10}, now: func() time.Time { return time.UnixMilli(10_000) }}
	for _, c := range []struct {
		wrote, prev int64
		idle        bool
	}{
		{9900, 9800, false},
		{9900, 9850, false},
		{9800, 9600, true},
		{9900, 9700, true},
		{9800, 9700, true},
		{5000, 5000, true},
		{9999, 9999, true},
	} {
		if got := (sharder{s}).idleShards([]*item.Image{{WroteMs: c.wrote, PrevMs: c.prev}}); got != c.idle {
			t.Errorf("idleShards(written at %d after %d, now 10000) = %t, want %t", c.wrote, c.prev, got, c.idle)
		}
	}
}

// TestLoadsCalmAtTheMergeRate: a window of 4 shards is calm below the
// merge rate per shard of 2 (10/s: 18 writes in a second are 9 a shard)
// and not at it (20 writes, 10 a shard): a minute calm merges, a window at
// the rate does not. A bucket of 2 shards at the write rate doubles to 4.
func TestLoadsCalmAtTheMergeRate(t *testing.T) {
	c := Config{ShardWriteRate: -1, ShardMergeRate: 10, ShardMergeAfter: time.Minute}
	for _, tc := range []struct {
		writes int
		want   int
	}{{18, 2}, {20, 4}} {
		l := writeRates{m: newLRU[*writeRate]("load", 10)}
		for range tc.writes {
			l.count("b", 4, 10_000, c)
		}
		l.count("b", 4, 11_000, c) // closes the window of tc.writes
		if got := l.count("b", 4, 70_000, c); got != tc.want {
			t.Errorf("%d writes in the first second on 4 shards, then one a minute on: count = %d, want %d", tc.writes, got, tc.want)
		}
	}
	l := writeRates{m: newLRU[*writeRate]("load", 10)}
	hot := Config{ShardWriteRate: 100, ShardMergeRate: -1}
	got := 2
	for range 200 { // 100 a shard in one window
		got = l.count("b", 2, 0, hot)
	}
	if got != 4 {
		t.Errorf("200 writes in a window on 2 shards at 100/s a shard: count = %d, want 4", got)
	}
}
