package degrade

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// tick is how often Run looks for items due a settle-up when nothing wakes
// it.
const tick = 50 * time.Millisecond

// Run settles up until ctx ends: each tracked item that is degraded or owes
// a debt, when it is due, gets one settlement (its debt, or a charge of
// nothing as a probe); one that lands pays the debt and, when nothing more
// is owed, brings a degraded item back to the shared store. On return every
// settle-up it started has ended; debts not settled are lost with the
// process.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	sem := make(chan struct{}, s.cfg.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for _, it := range s.due() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				s.release(it)
				continue
			}
			wg.Go(func() {
				defer func() { <-sem }()
				s.settleUp(ctx, it)
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.wake:
		}
	}
}

// due returns the items a settle-up should be sent for now, each marked
// busy with its settlement in owed, and forgets the items with nothing to
// do for Config.Idle.
func (s *Store) due() []*item {
	now := s.nowMs()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*item
	degraded := 0
	for k, it := range s.items {
		if it.degraded {
			degraded++
		}
		if it.busy {
			continue
		}
		owes := it.owed != nil || it.owes()
		if !it.degraded && !owes {
			if now-it.usedMs > s.cfg.Idle.Milliseconds() && it.refuseMs <= now {
				delete(s.items, k)
			}
			continue
		}
		if now < it.retryMs {
			continue
		}
		if it.owed == nil {
			it.owed = s.settlementLocked(it, now)
		}
		it.busy = true
		out = append(out, it)
	}
	s.tracked.Store(int64(len(s.items)))
	s.cfg.Observer.Items(degraded, len(s.items))
	return out
}

// Owes reports whether anything decided locally is not yet settled up.
func (s *Store) Owes() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if it.owed != nil || it.owes() {
			return true
		}
	}
	return false
}

// owes reports whether it owes anything. Caller holds s.mu.
func (it *item) owes() bool {
	for _, l := range it.limits {
		if l.pending != 0 {
			return true
		}
	}
	return false
}

// settlementLocked is it's debt as a settlement of a new ID: per limit a
// charge of what was debited locally (a refund when refunds were more),
// a charge of nothing when nothing is owed (a probe). Caller holds s.mu.
func (s *Store) settlementLocked(it *item, now int64) *cascade.Settlement {
	s.seq++
	st := &cascade.Settlement{
		ID:      "local-" + s.cfg.ID + "-" + strconv.FormatUint(s.seq, 36),
		Expires: time.UnixMilli(now).Add(settlementLife),
	}
	for name, l := range it.limits {
		d := cascade.Debit{Key: it.key, Limit: name, Bucket: l.bucket, Op: cascade.Charge, Amount: l.pending}
		if l.pending < 0 {
			d.Op, d.Amount = cascade.Refund, -l.pending
		}
		l.settling = l.pending
		st.Debits = append(st.Debits, d)
	}
	return st
}

// release marks it not busy without a try.
func (s *Store) release(it *item) {
	s.mu.Lock()
	it.busy = false
	s.mu.Unlock()
}

// settleUp sends it's settlement and applies the outcome.
func (s *Store) settleUp(ctx context.Context, it *item) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.SettleTimeout)
	res, err := s.shared.Settle(cctx, it.owed)
	cancel()
	now := s.nowMs()
	s.mu.Lock()
	defer s.mu.Unlock()
	it.busy = false
	switch {
	case err == nil:
		for i, d := range it.owed.Debits {
			l := it.limits[d.Limit]
			l.pending -= l.settling
			l.settling = 0
			if !res.Duplicate && i < len(res.Statuses) && l.bucket == d.Bucket {
				l.lower(res.Statuses[i].Remaining, now)
			}
		}
		it.owed = nil
		it.attempt, it.retryMs = 0, now
		if !it.owes() {
			it.degraded = false
		}
		result := SettledApplied
		if res.Duplicate {
			result = SettledDuplicate
		}
		s.cfg.Observer.SettledUp(result)
		s.kickLocked(it)
	case errors.Is(err, cascade.ErrInvalid) || now > it.owed.Expires.UnixMilli():
		// Nothing the shared store can take: dropped, not retried forever.
		for _, l := range it.limits {
			l.pending -= l.settling
			l.settling = 0
		}
		it.owed = nil
		it.degraded = false
		s.cfg.Observer.SettledUp(SettledDropped)
	default:
		// Not taken, or unanswered (it may have landed): the same
		// settlement, same ID, again after a backoff.
		it.degraded = true
		it.attempt++
		it.retryMs = now + s.backoff(it.attempt).Milliseconds()
		s.cfg.Observer.SettledUp(SettledFailed)
	}
}

// kickLocked wakes Run at once when it owes more (debits made while its
// settle-up was in flight).
func (s *Store) kickLocked(it *item) {
	if it.owes() {
		s.kick()
	}
}

// backoff is the wait before the attempt-th retry of an item: Probe
// doubled per attempt, at most MaxProbe.
func (s *Store) backoff(attempt int) time.Duration {
	return min(s.cfg.Probe<<min(attempt-1, 10), s.cfg.MaxProbe)
}
