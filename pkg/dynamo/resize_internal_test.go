package dynamo

import (
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestLoadsCount steps one bucket's measure through a hot window (a
// doubling at ShardWriteRate per shard, once until done), a busy window
// that is not calm, and idle windows (a merge after ShardMergeAfter).
func TestLoadsCount(t *testing.T) {
	c := Config{ShardWriteRate: 100, ShardMergeRate: 10, ShardMergeAfter: time.Minute}
	l := loads{m: newLRU[*load]("load", 10)}
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
