package degrade

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// tick is how often Run looks for items due a repayment when nothing wakes
// it.
const tick = 50 * time.Millisecond

// Run repays until ctx ends: each tracked item that is degraded or owes a
// debt, when it is due, gets one repayment (its debt, or a charge of
// nothing as a probe); one that lands pays the debt and, when nothing more
// is owed, brings a degraded item back to the shared store. When ctx ends
// it makes a last pass at what is still owed, for at most Config.Drain
// (see lastPass); what that does not repay is lost, and said so. On return
// every repayment it started has ended.
func (s *Store) Run(ctx context.Context) error {
	s.repayUntil(ctx)
	s.lastPass(context.WithoutCancel(ctx))
	return nil
}

// repayUntil is Run's work until ctx ends; every repayment it started has
// ended when it returns.
func (s *Store) repayUntil(ctx context.Context) {
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
				s.repay(ctx, it)
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// due returns the items a repayment should be sent for now, each marked
// busy with its repayment in owed, and forgets the items with nothing to
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
		s.startLocked(it, now)
		out = append(out, it)
	}
	s.tracked.Store(int64(len(s.items)))
	s.cfg.Observer.Items(degraded, len(s.items))
	return out
}

// startLocked marks it busy, with its repayment in owed. Caller holds s.mu.
func (s *Store) startLocked(it *item, now int64) {
	if it.owed == nil {
		it.owed = s.repaymentLocked(it, now)
	}
	it.busy = true
}

// Owes reports whether anything decided locally is not yet repaid.
func (s *Store) Owes() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if it.inDebt() {
			return true
		}
	}
	return false
}

// owes reports whether it owes anything not yet in a repayment. Caller
// holds s.mu.
func (it *item) owes() bool {
	for _, l := range it.limits {
		if l.pending != 0 {
			return true
		}
	}
	return false
}

// inDebt reports whether it owes anything, in a repayment or not: a probe
// in flight is no debt. Caller holds s.mu.
func (it *item) inDebt() bool {
	for _, l := range it.limits {
		if l.pending != 0 || l.repaying != 0 {
			return true
		}
	}
	return false
}

// repaymentLocked is it's debt as a repayment of a new stamp: per limit a
// charge of what was debited locally (a refund when refunds were more),
// a charge of nothing when nothing is owed (a probe). The stamp is this
// replica's clock in microseconds, higher than every stamp before. Caller
// holds s.mu.
func (s *Store) repaymentLocked(it *item, now int64) *cascade.Repayment {
	s.stamp = max(s.cfg.Now().UnixMicro(), s.stamp+1)
	r := &cascade.Repayment{Replica: s.cfg.ID, Stamp: s.stamp, Key: it.key}
	it.owedExp = now + repaymentLife.Milliseconds()
	for name, l := range it.limits {
		d := cascade.Debit{Key: it.key, Limit: name, Bucket: l.bucket, Op: cascade.Charge, Amount: l.pending}
		if l.pending < 0 {
			d.Op, d.Amount = cascade.Refund, -l.pending
		}
		l.repaying = l.pending
		r.Debits = append(r.Debits, d)
	}
	it.repaying = it.decisions
	return r
}

// release marks it not busy without a try.
func (s *Store) release(it *item) {
	s.mu.Lock()
	it.busy = false
	s.mu.Unlock()
}

// repay sends it's repayment and applies the outcome.
func (s *Store) repay(ctx context.Context, it *item) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.RepayTimeout)
	res, err := s.shared.Repay(cctx, it.owed)
	cancel()
	now := s.nowMs()
	s.mu.Lock()
	defer s.mu.Unlock()
	it.busy = false
	switch {
	case err == nil:
		s.heard()
		for i, d := range it.owed.Debits {
			l := it.limits[d.Limit]
			if !res.Duplicate && i < len(res.Statuses) && l.bucket == d.Bucket {
				l.lower(res.Statuses[i].Remaining, now)
			}
		}
		it.paid()
		it.attempt, it.retryMs = 0, now
		if !it.owes() {
			it.degraded = false
		}
		result := RepayApplied
		if res.Duplicate {
			result = RepayDuplicate
		}
		s.cfg.Observer.Repaid(result)
		s.kickLocked(it)
		s.answeredLocked(now)
	case errors.Is(err, cascade.ErrInvalid) || now > it.owedExp:
		// Nothing the shared store can take: dropped, not retried forever.
		tokens, decisions := it.tokens(func(l *limit) tokenbucket.Millitokens { return l.repaying }), it.repaying
		it.paid()
		it.degraded = false
		s.cfg.Observer.Repaid(RepayDropped)
		if tokens != 0 || decisions != 0 {
			s.cfg.Observer.Lost(tokens, decisions)
		}
	default:
		// Not taken, or unanswered (it may have landed): the same
		// repayment, same stamp, again after a backoff, or as soon as the
		// shared store answers another call (answered).
		s.failing()
		it.degraded = true
		it.attempt++
		it.retryMs = now + s.backoff(it.attempt).Milliseconds()
		s.backedOff.Store(true)
		s.cfg.Observer.Repaid(RepayFailed)
	}
}

// answered tells that the shared store answered a call in time: the items
// whose repayment waits on a backoff after failing are due at once, so
// that they come back as soon as the store does, not up to
// Config.MaxProbe later.
func (s *Store) answered() {
	if !s.backedOff.Load() {
		return
	}
	s.mu.Lock()
	s.answeredLocked(s.nowMs())
	s.mu.Unlock()
}

// answeredLocked is answered with s.mu held.
func (s *Store) answeredLocked(now int64) {
	if !s.backedOff.Swap(false) {
		return
	}
	for _, it := range s.items {
		if it.attempt > 0 && !it.busy && it.retryMs > now {
			it.retryMs = now
		}
	}
	s.kick()
}

// paid takes the repayment in owed off what it owes. Caller holds s.mu.
func (it *item) paid() {
	for _, l := range it.limits {
		l.pending -= l.repaying
		l.repaying = 0
	}
	it.decisions -= it.repaying
	it.repaying = 0
	it.owed = nil
}

// kickLocked wakes Run at once when it owes more (debits made while its
// repayment was in flight).
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
