package dynamo

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// How a give-back of a refused plan ended (Observer.GaveBack). A give-back
// returns what one part of a refused plan consumed from its bucket item,
// capped at capacity; it is written at most once.
const (
	// GiveBackApplied: it landed within the decision's own give-back
	// budget (4×Config.Timeout).
	GiveBackApplied = "applied"
	// GiveBackAppliedRetry: it landed later, retried in the background.
	GiveBackAppliedRetry = "applied_retry"
	// GiveBackDroppedAge: DynamoDB did not take it before GiveBackMaxAge;
	// the tokens stay consumed.
	GiveBackDroppedAge = "dropped_age"
	// GiveBackDroppedBound: the oldest pending give-back, dropped to keep
	// at most GiveBackMaxPending; the tokens stay consumed.
	GiveBackDroppedBound = "dropped_bound"
	// GiveBackDroppedClosed: still pending when the store closed (after
	// one last try), or refused after Close; the tokens stay consumed.
	GiveBackDroppedClosed = "dropped_closed"
	// GiveBackMoot: DynamoDB answered that the table is gone, or that the
	// bucket item holds what this schema cannot read: there is nothing to
	// give back to.
	GiveBackMoot = "moot"
	// GiveBackUnknown: its write went unanswered, so it may have landed;
	// it is never written again (that could give back twice), and when it
	// did not land the tokens stay consumed: fewer admissions, never more.
	GiveBackUnknown = "unknown"
)

const (
	// GiveBackMaxAge is how long a give-back that DynamoDB did not take
	// (throttled, unreachable, its item too busy) is retried in the
	// background, from the refusal of its plan. By then a bucket refilling
	// at any common rate is full again, so a later give-back would mostly
	// be capped away.
	GiveBackMaxAge = 5 * time.Minute
	// GiveBackMaxPending bounds the give-backs a store keeps for retrying:
	// past it, the oldest one not in flight is dropped.
	GiveBackMaxPending = 4096

	// giveBackParallel bounds the background tries in flight at once.
	giveBackParallel = 16
	// Background tries wait giveBackMinBackoff, doubling up to
	// giveBackMaxBackoff, jittered.
	giveBackMinBackoff = 50 * time.Millisecond
	giveBackMaxBackoff = 5 * time.Second
	// giveBackMinDrain is the least budget of Close's last try of the
	// pending give-backs (otherwise 4×Config.Timeout).
	giveBackMinDrain = 250 * time.Millisecond
)

// givebacks are the give-backs of refused plans that did not land within
// their decision's budget, owned by the store: one goroutine
// (retryGiveBacks) retries them while any is pending, and Close drains
// them.
type givebacks struct {
	mu      sync.Mutex
	q       []*pendingGiveBack // oldest first
	running bool               // retryGiveBacks runs
	closing bool               // Close began: nothing more is kept
	full    bool               // the bound dropped one since the queue was last empty (warned)
	wake    chan struct{}      // a give-back was kept (buffered, 1)
	drain   chan struct{}      // closed by Close
	wg      sync.WaitGroup     // retryGiveBacks
	maxAge  time.Duration
	max     int
}

type pendingGiveBack struct {
	c     *part     // the give-back (the retrier's alone)
	since time.Time // when its plan was refused (the store's clock)
	next  time.Time // when it is tried next (the runtime's clock: a wait)
	tries int       // background tries so far
	busy  bool      // a try is in flight (guarded by givebacks.mu)
}

func (g *givebacks) init() {
	g.wake, g.drain = make(chan struct{}, 1), make(chan struct{})
	g.maxAge, g.max = GiveBackMaxAge, GiveBackMaxPending
}

// giveBackResult says how a try of a give-back ended, or "" when it did
// not land and may land later (throttled, the item too busy, a read that
// failed: nothing was written). late says it was tried in the background.
func giveBackResult(err error, late bool) string {
	switch {
	case err == nil && late:
		return GiveBackAppliedRetry
	case err == nil:
		return GiveBackApplied
	case errors.Is(err, errClosed):
		return GiveBackDroppedClosed
	case errors.Is(err, ErrNoTable), errors.Is(err, item.ErrSchema):
		return GiveBackMoot
	case errors.Is(err, errOutcomeUnknown):
		return GiveBackUnknown
	}
	return ""
}

// giveBackBackoff is the wait before background try n (from 0).
func giveBackBackoff(n int) time.Duration {
	d := giveBackMaxBackoff
	if n < 16 && giveBackMinBackoff<<n < giveBackMaxBackoff {
		d = giveBackMinBackoff << n
	}
	return d/2 + rand.N(d/2+1)
}

// again returns give-back c afresh for a try after its decision returned:
// the same item, shard and amounts (so the same refund, at most once),
// none of the results of the tries before.
func (c *part) again() *part {
	r := &part{kind: c.kind, b: c.b, debits: c.debits, scale: c.scale, from: c.from}
	r.choose(c.shard)
	return r
}

// gaveBack counts a give-back that ended, and logs those that leave tokens
// consumed.
func (s giveBacker) gaveBack(result string, c *part, err error) {
	s.obs.GaveBack(result)
	switch result {
	case GiveBackUnknown:
		s.log.WithError(err).WithField("item", c.pk).Warn("a give-back of a refused plan went unanswered: it is not written again, its tokens may stay consumed")
	case GiveBackDroppedAge:
		s.log.WithError(err).WithField("item", c.pk).Warn("dropped a give-back of a refused plan that DynamoDB did not take within its maximum age: its tokens stay consumed")
	case GiveBackMoot:
		s.log.WithError(err).WithField("item", c.pk).Info("dropped a give-back whose table or bucket item is gone or unreadable")
	}
}

// keep queues give-back c, which did not land within its decision's budget
// and may land later, to be retried in the background. Past the bound the
// oldest pending give-back not in flight is dropped (when all are in
// flight, c is); after Close began, c is.
func (s giveBacker) keep(c *part, since time.Time) {
	g := &s.gb
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		s.gaveBack(GiveBackDroppedClosed, c, nil)
		return
	}
	if len(g.q) >= g.max {
		i := slices.IndexFunc(g.q, func(p *pendingGiveBack) bool { return !p.busy })
		if i < 0 {
			s.gaveBack(GiveBackDroppedBound, c, nil)
			return
		}
		old := g.q[i]
		g.q = slices.Delete(g.q, i, i+1)
		s.gaveBack(GiveBackDroppedBound, old.c, old.c.err)
		if !g.full {
			g.full = true
			s.log.WithField("pending", g.max).Warn("too many give-backs of refused plans are pending: dropping the oldest, whose tokens stay consumed")
		}
	}
	g.q = append(g.q, &pendingGiveBack{c: c, since: since, next: time.Now().Add(giveBackBackoff(0))})
	s.obs.GiveBacksPending(len(g.q)) // under the lock, so that reports stay in order
	if !g.running {
		g.running = true
		g.wg.Add(1)
		go s.retryGiveBacks()
		return
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// retryGiveBacks tries the pending give-backs as they come due, at most
// giveBackParallel at once, each with a deadline of its own, until none is
// pending or Close drains them.
func (s giveBacker) retryGiveBacks() {
	g := &s.gb
	defer g.wg.Done()
	for {
		select {
		case <-g.drain:
			s.drainGiveBacks()
			return
		default:
		}
		g.mu.Lock()
		wall, now := time.Now(), s.now() // the schedule is a wait; the age, a reading of the clock
		var due []*pendingGiveBack
		var next time.Time
		for i := 0; i < len(g.q); {
			p := g.q[i]
			if p.next.After(wall) || len(due) == giveBackParallel {
				if next.IsZero() || p.next.Before(next) {
					next = p.next
				}
				i++
				continue
			}
			if now.Sub(p.since) >= g.maxAge {
				g.q = slices.Delete(g.q, i, i+1)
				s.gaveBack(GiveBackDroppedAge, p.c, p.c.err)
				s.obs.GiveBacksPending(len(g.q))
				continue
			}
			p.busy = true
			due = append(due, p)
			i++
		}
		if len(g.q) == 0 {
			g.running, g.full = false, false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if len(due) == 0 {
			t := time.NewTimer(time.Until(next))
			select {
			case <-t.C:
			case <-g.wake:
			case <-g.drain:
			}
			t.Stop()
			continue
		}
		s.tryGiveBacks(s.life, due)
		g.mu.Lock()
		for _, p := range due {
			p.busy, p.tries = false, p.tries+1
			if res := giveBackResult(p.c.err, true); res != "" {
				g.q = slices.DeleteFunc(g.q, func(q *pendingGiveBack) bool { return q == p })
				s.gaveBack(res, p.c, p.c.err)
				continue
			}
			p.next = time.Now().Add(giveBackBackoff(p.tries))
		}
		s.obs.GiveBacksPending(len(g.q))
		g.mu.Unlock()
	}
}

// tryGiveBacks tries each give-back once, in its item's lane, each with a
// budget of 4×Config.Timeout within ctx.
func (s giveBacker) tryGiveBacks(ctx context.Context, ps []*pendingGiveBack) {
	var wg sync.WaitGroup
	for _, p := range ps {
		c := p.c.again()
		p.c = c
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 4*s.cfg.Timeout)
			defer cancel()
			s.await(actx, c)
		})
	}
	wg.Wait()
}

// drainGiveBacks is Close's last try of the pending give-backs: each is
// tried once more, giveBackParallel at a time, while a short deadline
// lasts; what did not land then is dropped.
func (s giveBacker) drainGiveBacks() {
	g := &s.gb
	g.mu.Lock()
	ps := g.q
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.life, max(4*s.cfg.Timeout, giveBackMinDrain))
	defer cancel()
	tried := 0
	for tried < len(ps) && ctx.Err() == nil {
		n := min(len(ps)-tried, giveBackParallel)
		s.tryGiveBacks(ctx, ps[tried:tried+n])
		tried += n
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, p := range ps {
		res := GiveBackDroppedClosed
		if i < tried {
			if r := giveBackResult(p.c.err, true); r != "" {
				res = r
			}
		}
		s.gaveBack(res, p.c, p.c.err)
	}
	g.q, g.running = nil, false
	s.obs.GiveBacksPending(0)
}

// closeGiveBacks makes the store keep no more give-backs and waits for the
// retrier to drain those pending. It runs before Close closes the lanes,
// which the last tries need.
func (s giveBacker) closeGiveBacks() {
	g := &s.gb
	g.mu.Lock()
	if !g.closing {
		g.closing = true
		close(g.drain)
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// giveBacker keeps, retries and drains the give-backs of refused plans (giveback.go).
type giveBacker struct{ *Store }
