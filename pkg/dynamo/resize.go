package dynamo

import (
	"context"
	"errors"
	"sync"
	"time"
)

// loadWindow is the window over which a bucket's write rate is measured
// (Config.ShardWriteRate, Config.ShardMergeRate).
const loadWindow = time.Second

// resizeBudget bounds a doubling or a merge started by the write rate: its
// reads and its transaction (up to MaxShards items).
const resizeBudget = 5 * time.Second

// loads measures the rate of this replica's writes to each bucket (all its
// shards), in windows of loadWindow, and says when to double or halve its
// shard count. Safe for concurrent use.
type writeRates struct {
	mu sync.Mutex
	m  *lru[*writeRate] // by bucket base
}

// load is one bucket's measure.
type writeRate struct {
	startMs int64 // when the window began
	writes  int   // this replica's writes to the bucket in the window
	calmMs  int64 // since when every window was below the merge rate (0: not calm)
	busy    bool  // a doubling or merge is under way
	endedMs int64 // when the last doubling on throttling ended (0: none)
	races   int   // this replica's writes to a hot bucket that lost a race, since the window began
}

// of returns base's rate, tracking it from nowMs if it is not. Caller
// holds l.mu.
func (l *writeRates) of(base string, nowMs int64) *writeRate {
	ld, ok := l.m.get(base)
	if !ok {
		ld = &writeRate{startMs: nowMs}
		l.m.add(base, ld)
	}
	return ld
}

// count counts a write to the bucket base, whose shard count is n, at nowMs,
// and returns the shard count to move it to: 2n when this window's writes
// reach Config.ShardWriteRate per shard (before DynamoDB throttles the
// items), n/2 when, measured on closed windows, the bucket stayed below
// Config.ShardMergeRate per shard of n/2 for Config.ShardMergeAfter; else
// n (nothing to do). A move returned is under way until done.
func (l *writeRates) count(base string, n int, nowMs int64, c Config) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	ld := l.of(base, nowMs)
	if elapsed := nowMs - ld.startMs; elapsed >= loadWindow.Milliseconds() {
		// A closed window: the rate each of n/2 shards would take.
		perShard := float64(ld.writes) * 1000 / float64(elapsed) / float64(max(n/2, 1))
		switch {
		case n <= 1 || c.ShardMergeRate <= 0 || perShard >= c.ShardMergeRate:
			ld.calmMs = 0
		case ld.calmMs == 0:
			ld.calmMs = ld.startMs
		}
		ld.startMs, ld.writes, ld.races = nowMs, 0, 0
	}
	ld.writes++
	if ld.busy {
		return n
	}
	to := n
	switch {
	case c.ShardWriteRate > 0 && n < MaxShards && float64(ld.writes) >= c.ShardWriteRate*float64(n)*loadWindow.Seconds():
		to = 2 * n
	case ld.calmMs != 0 && nowMs-ld.calmMs >= c.ShardMergeAfter.Milliseconds():
		to = n / 2
	}
	ld.busy = to != n
	return to
}

// done ends a move that count or claim returned: the bucket is measured
// afresh.
func (l *writeRates) done(base string, nowMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ld, ok := l.m.peek(base); ok {
		*ld = writeRate{startMs: nowMs, endedMs: nowMs}
	}
}

// claim reports whether a write of base that DynamoDB throttled at nowMs
// may start a doubling: none is under way and none ended within
// loadWindow. A doubling claimed is under way until done.
func (l *writeRates) claim(base string, nowMs int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ld := l.of(base, nowMs)
	if ld.busy || ld.endedMs != 0 && nowMs-ld.endedMs < loadWindow.Milliseconds() {
		return false
	}
	ld.busy = true
	return true
}

// raceMin is the least number of races lost in a window that doubles a hot
// bucket (raced).
const raceMin = 20

// raced counts a write of the hot bucket base (n shards) that lost a race
// at nowMs, and reports whether to double it: its window's lost races are
// at least raceMin and at least its writes that landed, and no move is
// under way or ended within loadWindow. Replicas sharing a shard lose
// races to each other, each one a write billed; more shards, fewer
// sharing (pace.go). A doubling returned is under way until done.
func (l *writeRates) raced(base string, n int, nowMs int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ld := l.of(base, nowMs)
	ld.races++
	if ld.busy || n >= MaxShards || ld.races < raceMin || ld.races < ld.writes ||
		ld.endedMs != 0 && nowMs-ld.endedMs < loadWindow.Milliseconds() {
		return false
	}
	ld.busy = true
	return true
}

// racedWrite counts a write of the hot bucket b (n shards) that lost a
// race, and doubles b in the background when raced says so.
func (s sharder) racedWrite(b bucket, n int, nowMs int64) {
	if !s.rates.raced(b.base, n, nowMs) {
		return
	}
	s.wg.Add(1) // the batch that wrote holds the store's group: Close waits
	go func() {
		defer s.wg.Done()
		s.resize(b, n, 2*n)
	}()
}

// throttledWrite feeds a write of b (n shards) that DynamoDB throttled back
// into its shard count: it doubles b within ctx, and within a quarter of
// the decision's budget, unless this replica is doubling or merging b
// already or ended a doubling within loadWindow, and reports whether it
// tried. The doubling's writes are tried again while DynamoDB throttles
// them; a quarter leaves the batch most of its budget for its own write.
// One doubling per window, not one per throttled batch: each writes every
// shard, the throttled ones too.
func (s sharder) throttledWrite(ctx context.Context, b bucket, n int, nowMs int64) bool {
	if n >= MaxShards || !s.rates.claim(b.base, nowMs) {
		return false
	}
	_ = s.double(ctx, b, n, s.cfg.Timeout/4) // failed: tried again on a throttle loadWindow on
	s.rates.done(b.base, s.nowMs())
	return true
}

// finish finishes, in the background, a doubling of b from n that left a
// shard pending past pendingGrace (double.go), unless this replica is
// resizing b already or ended a doubling of it within loadWindow.
func (s sharder) finish(b bucket, n int) {
	if n < 1 || n >= MaxShards || !s.rates.claim(b.base, s.nowMs()) {
		return
	}
	s.wg.Add(1) // the batch that met the shard holds the store's group: Close waits
	go func() {
		defer s.wg.Done()
		s.resize(b, n, 2*n)
	}()
}

// wrote counts a write of this replica to b, whose shard count is n, and
// starts a doubling or a merge in the background when count says so.
func (s sharder) wrote(b bucket, n int, nowMs int64) {
	to := s.rates.count(b.base, n, nowMs, s.cfg)
	if to == n {
		return
	}
	s.wg.Add(1) // the batch that wrote holds the store's group: Close waits
	go func() {
		defer s.wg.Done()
		s.resize(b, n, to)
	}()
}

// resize doubles or halves b's shard count from n, whichever to says.
// Losing a race (another replica's doubling or merge, a write between the
// merge's read and its transaction) is no error: the bucket is measured
// again.
func (s sharder) resize(b bucket, n, to int) {
	ctx, cancel := context.WithTimeout(s.life, resizeBudget)
	defer cancel()
	var err error
	if to > n {
		err = s.double(ctx, b, n, resizeBudget)
	} else {
		err = s.merge(ctx, b, n)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.WithError(err).WithField("shards", n).Warn("changing the shard count of a bucket failed")
	}
	s.rates.done(b.base, s.nowMs())
}
