package degrade

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// lastTries is how many times the last pass tries one item's repayment.
// The DynamoDB store retries one for a second of its own (at least), so
// two ride out a throttled item, while a store that is down holds the stop
// for about two seconds.
const lastTries = 2

// lastPass is Run's end, once its context has ended and the repayments in
// flight have too: each item that owes gets its repayment tried (one that
// failed before again, with its ID), and a failed one again after the
// backoff, at most lastTries times while Config.Drain lasts (no try starts
// after it; one in flight then ends within the shared store's own budget,
// the DynamoDB store's for charges). Degraded items that owe nothing are
// not probed. What is still owed then is lost: counted (Observer.Lost) and
// logged, once.
func (s *Store) lastPass(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Drain)
	defer cancel()
	start := s.cfg.Now()
	items := 0
	for try := 1; try <= lastTries && ctx.Err() == nil && s.Owes(); try++ {
		if try > 1 && !wait(ctx, s.backoff(try-1)) {
			break
		}
		its := s.owing()
		items = max(items, len(its))
		s.repayAll(ctx, its)
	}
	log := s.cfg.Log.WithFields(logrus.Fields{"replica": s.cfg.ID, "items": items, "took": s.cfg.Now().Sub(start).Round(time.Millisecond)})
	tokens, decisions, left := s.lose()
	if left == 0 {
		if items > 0 {
			log.Info("stopping: repaid what was decided locally to the shared store")
		}
		return
	}
	s.cfg.Observer.Lost(tokens, decisions)
	log.WithFields(logrus.Fields{"lost_items": left, "lost_tokens": float64(tokens) / 1000, "lost_decisions": decisions}).
		Warn("stopping: debts decided locally (ON_UNAVAILABLE=local) could not be repaid to the shared store and are lost")
}

// owing returns the items that owe, each marked busy with its repayment in
// owed.
func (s *Store) owing() []*item {
	now := s.nowMs()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*item
	for _, it := range s.items {
		if !it.busy && it.inDebt() {
			s.startLocked(it, now)
			out = append(out, it)
		}
	}
	return out
}

// repayAll sends the repayments of its, Config.Workers at a time, and
// returns when every one has ended; those not sent before ctx ends are
// not sent (a store may carry on with one sent: the DynamoDB store does,
// within its own budget).
func (s *Store) repayAll(ctx context.Context, its []*item) {
	sem := make(chan struct{}, s.cfg.Workers)
	var wg sync.WaitGroup
	for _, it := range its {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			s.release(it)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.repay(ctx, it)
		})
	}
	wg.Wait()
}

// lose forgets every debt still owed and returns what they added up to:
// tokens owed to the shared buckets (charges and refunds alike), the
// local decisions they were owed for (once per item), and the items.
func (s *Store) lose() (tokens tokenbucket.Millitokens, decisions, items int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if !it.inDebt() {
			continue
		}
		items++
		tokens += it.tokens(func(l *limit) tokenbucket.Millitokens { return l.pending })
		decisions += it.decisions
		for _, l := range it.limits {
			l.pending, l.repaying = 0, 0
		}
		it.decisions, it.repaying, it.owed = 0, 0, nil
	}
	return tokens, decisions, items
}

// tokens adds up part of each of it's limits, a refund as much as a
// charge. Caller holds s.mu.
func (it *item) tokens(part func(*limit) tokenbucket.Millitokens) tokenbucket.Millitokens {
	var sum tokenbucket.Millitokens
	for _, l := range it.limits {
		sum += max(part(l), -part(l))
	}
	return sum
}

// wait waits d, false when ctx ends first.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
