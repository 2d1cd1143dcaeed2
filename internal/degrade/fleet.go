package degrade

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// retryBeat is how soon a heartbeat that failed is tried again; fastBeat
// the interval while the count changed within the last steadyBeats
// intervals.
const (
	retryBeat   = 250 * time.Millisecond
	fastBeat    = time.Second
	steadyBeats = 6
)

// Heart records a replica's heartbeat in the shared store (the DynamoDB
// store's Heartbeat): alive until now + ttl, stale the replicas to forget,
// and how many are alive and which to forget next.
type Heart interface {
	Heartbeat(ctx context.Context, id string, ttl time.Duration, stale []string) (live int, expired []string, err error)
}

// Fleet knows the number of live replicas: a fixed size, or the count of
// heartbeats in the shared store, the last one kept while the store does
// not answer.
type Fleet struct {
	id    string
	fixed int
	live  atomic.Int64
	beats atomic.Int64 // heartbeats that counted the fleet
	beat  atomic.Int64 // when the last one did (unix ms)
}

// NewFleet returns a fleet of fixed replicas (FLEET_SIZE), or counted by
// heartbeats (Beat) when fixed is 0; until the first count it is 1.
func NewFleet(fixed int) *Fleet {
	var b [8]byte
	_, _ = rand.Read(b[:])
	f := &Fleet{id: hex.EncodeToString(b[:]), fixed: fixed}
	f.live.Store(1)
	return f
}

// ID is this replica's id: random, made at start.
func (f *Fleet) ID() string { return f.id }

// Size is the number of live replicas, at least 1.
func (f *Fleet) Size() int {
	if f.fixed > 0 {
		return f.fixed
	}
	return int(max(f.live.Load(), 1))
}

// Answered returns when the shared store last answered a heartbeat of
// this replica (zero: never; always with a fixed size). A Store takes it
// as Config.Answered: a store that answers heartbeats is not down.
func (f *Fleet) Answered() time.Time {
	if ms := f.beat.Load(); ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// Settled reports whether Size can be relied on: the size is fixed, or
// this replica has counted the fleet at two heartbeats. Replicas that start
// together learn of each other at their beats, so the first count may be
// short of the fleet; by the second (a second later) every replica that
// started with it has beaten.
func (f *Fleet) Settled() bool { return f.fixed > 0 || f.beats.Load() >= 2 }

// Beat records this replica's heartbeat every interval until ctx ends
// (alive for 3 intervals; then it leaves the record), counting the live replicas each time; a beat
// that fails keeps the last count and is tried again after 250 ms (the
// first beats fail until the store is open: nothing is logged of those,
// until one has counted the fleet). For 6 intervals after the
// count changes (or is first made) it beats every second, so that a fleet
// that starts or scales agrees on its size within about a second. With a
// fixed size it only waits.
func (f *Fleet) Beat(ctx context.Context, h Heart, interval time.Duration, log *logrus.Entry) error {
	if f.fixed > 0 || h == nil {
		<-ctx.Done()
		return nil
	}
	var stale []string
	failing := false
	var changed time.Time // when the count last changed (or was first made)
	for {
		live, expired, err := h.Heartbeat(ctx, f.id, 3*interval, stale)
		switch {
		case err == nil:
			f.beats.Add(1)
			f.beat.Store(time.Now().UnixMilli())
			if old := f.live.Swap(int64(live)); old != int64(live) || changed.IsZero() {
				log.WithFields(logrus.Fields{"replicas": live, "was": old}).Info("fleet size changed (ON_UNAVAILABLE=local shares limits by it)")
				changed = time.Now()
			}
			stale, failing = expired, false
		case f.beats.Load() == 0:
			// Warming up: the store is not open yet. Its warm-up says
			// what is wrong, if anything is.
		case ctx.Err() == nil && !failing:
			log.WithError(err).WithField("replicas", f.live.Load()).Warn("fleet heartbeat failed; keeping the last count")
			failing = true
		}
		wait := interval
		switch {
		case err != nil:
			// Not counted yet, or DynamoDB not answering: try again soon,
			// so that a replica counts the fleet as soon as it can.
			wait = min(interval, retryBeat)
		case time.Since(changed) < steadyBeats*interval:
			// The fleet is starting or scaling: the other replicas are
			// learned of at this replica's beats, so beat more often
			// until the count has held a while.
			wait = min(interval, fastBeat)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.leave(ctx, h)
			return nil
		case <-t.C:
		}
	}
}

// leaveTimeout bounds the last heartbeat, the one that leaves the record.
const leaveTimeout = time.Second

// leave records, once Beat's ctx ended, that this replica is alive no
// longer (a heartbeat of no time): the others count it out at their next
// beat rather than when its time passes, two intervals later. A replica
// that never counted the fleet has nothing to leave.
func (f *Fleet) leave(ctx context.Context, h Heart) {
	if f.beats.Load() == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	_, _, _ = h.Heartbeat(lctx, f.id, 0, nil)
}
