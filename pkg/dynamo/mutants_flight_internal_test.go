package dynamo

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY flight.go `time.Since(start) >= s.cfg.Timeout` wait: > and >= differ only when the wall clock (time.Since, not the store's clock) lands on the budget to the nanosecond, an instant no test can choose.

// newBareStore returns a store with no table behind it, for tests of its
// flights, whose reads are the tests' own functions.
func newBareStore(t *testing.T) *Store {
	t.Helper()
	l := logrus.New()
	l.SetOutput(io.Discard)
	s := &Store{cfg: Config{Table: "t", Timeout: time.Second}.WithDefaults(), now: time.Now, log: logrus.NewEntry(l), obs: nopObserver{}}
	s.lanes.m = map[string]*lane{}
	s.reads.m = map[string]*flight{}
	s.gb.init()
	s.life, s.stop = context.WithCancel(context.Background())
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// running returns how many reads of stored records the batcher counts.
func (s *Store) running() int {
	s.reads.mu.Lock()
	defer s.reads.mu.Unlock()
	return s.reads.records.running
}

// TestRecordReadsRunAtMostMaxRunning: with maxRunning reads of stored
// records running, the keys asked for next wait, together, in one read
// that starts when a running one ends; once every read ended, none is
// counted as running.
func TestRecordReadsRunAtMostMaxRunning(t *testing.T) {
	s := newBareStore(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before Close, which waits for the reads
	var mu sync.Mutex
	var reads [][]string
	read := func(_ context.Context, keys []string, _ *flight) error {
		mu.Lock()
		reads = append(reads, slices.Clone(keys))
		mu.Unlock()
		<-release
		return nil
	}
	decision := []context.Context{context.Background()}
	var fs []*flight
	for _, k := range []string{"k0", "k1", "k2", "k3"} {
		got := reader{s}.flyRecords([]string{k}, decision, read)
		if len(got) != 1 || got[0].queued {
			t.Fatalf("flyRecords(%s) with fewer than %d reads running = %d flights (queued: %v), want one read started", k, maxRunning, len(got), len(got) == 1 && got[0].queued)
		}
		fs = append(fs, got[0])
	}
	// Every running read has begun (called read), not only been counted:
	// else, on a busy machine, one that had not begun yet was overtaken by
	// the queued read once the others ended (seen once in make test).
	begun := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(reads)
	}
	for deadline := time.Now().Add(5 * time.Second); s.running() != maxRunning || begun() != maxRunning; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("reads running = %d and begun = %d, want %d", s.running(), begun(), maxRunning)
		}
	}
	next := reader{s}.flyRecords([]string{"k4", "k5"}, decision, read)
	if len(next) != 1 || !next[0].queued {
		t.Fatalf("flyRecords(k4, k5) with %d reads running = %d flights, want one queued read", maxRunning, len(next))
	}
	if again := (reader{s}).flyRecords([]string{"k5", "k6"}, decision, read); len(again) != 1 || again[0] != next[0] {
		t.Fatalf("flyRecords(k5, k6) = %d flights, want the one queued read", len(again))
	}
	unblock()
	for _, f := range append(fs, next[0]) {
		select {
		case <-f.done:
		case <-time.After(5 * time.Second):
			t.Fatal("a read did not end")
		}
	}
	mu.Lock()
	got := slices.Clone(reads)
	mu.Unlock()
	if len(got) != maxRunning+1 || !slices.Equal(got[maxRunning], []string{"k4", "k5", "k6"}) {
		t.Errorf("reads = %v, want %d of one key each, then one of k4, k5, k6", got, maxRunning)
	}
	for deadline := time.Now().Add(5 * time.Second); s.running() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("reads running after every read ended = %d, want 0", s.running())
		}
	}
}
