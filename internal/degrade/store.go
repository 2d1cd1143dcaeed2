package degrade

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Defaults of Config's zero fields.
const (
	// DefaultMaxItems bounds the items tracked at once.
	DefaultMaxItems = 1 << 16
	// DefaultProbe is how soon a degraded item is first tried again.
	DefaultProbe = 100 * time.Millisecond
	// DefaultMaxProbe bounds the backoff between tries of a degraded item.
	DefaultMaxProbe = 500 * time.Millisecond
	// DefaultIdle is how long an item whose debt is paid stays tracked
	// after its last local decision.
	DefaultIdle = 10 * time.Second
	// DefaultRepayTimeout bounds one repayment call.
	DefaultRepayTimeout = 2 * time.Second
	// DefaultWorkers bounds the repayments in flight.
	DefaultWorkers = 8
	// DefaultDrain bounds the last repay pass Run makes when it stops.
	DefaultDrain = 10 * time.Second
	// refusalWindow is how long a refusal of the shared store stands
	// locally.
	refusalWindow = time.Second
	// repaymentLife is how long a repayment is sent again, from its stamp
	// (cascade.Repayment: the shared store keeps a stamp longer); one
	// still failing then is dropped.
	repaymentLife = time.Hour
	// DefaultOutage is how long the shared store must have failed every
	// call of this replica, answering none, before a new local bucket
	// starts at its share of what it last showed (an outage: nobody is
	// admitting on the shared bucket); until then it starts bare
	// (startsBare), as the shared bucket may be giving its tokens to the
	// replicas it answers.
	DefaultOutage = time.Second
)

// Shared is the store a fleet shares: it decides plans and applies each
// replica's repayments once (cascade.Repayment), by the same kind of write
// that its decisions take.
type Shared interface {
	Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error)
	Repay(ctx context.Context, r *cascade.Repayment) (cascade.Settled, error)
}

// Seer is what a shared store can tell of a bucket without a call: the
// tokens it last saw (seen false when none), and whether the item refused
// within the last second. The DynamoDB store implements it.
type Seer interface {
	LastSeen(d *cascade.Debit) (tokens tokenbucket.Millitokens, seen, refused bool)
}

// Observer hears of local decisions, repayments and debts lost.
// Implementations must be safe for concurrent use and must not block.
type Observer interface {
	// Local is called once per plan decided locally, with whether it was
	// admitted.
	Local(admitted bool)
	// Items is called with the number of items degraded and tracked each
	// time a repay round ends.
	Items(degraded, tracked int)
	// Repaid is called once per repayment call, with its result:
	// RepayApplied, RepayDuplicate, RepayFailed or RepayDropped.
	Repaid(result string)
	// Lost is called with debts that will never be repaid: a repayment
	// dropped, or what is still owed when Run's last pass ends. tokens
	// adds up what every shared bucket was owed, charges and refunds
	// alike; decisions counts the local decisions it was owed for, once
	// per item they debited.
	Lost(tokens tokenbucket.Millitokens, decisions int)
}

// Repayment results (Observer.Repaid).
const (
	RepayApplied   = "applied"
	RepayDuplicate = "duplicate"
	RepayFailed    = "failed"
	RepayDropped   = "dropped"
)

// Config configures a Store. Zero fields take the defaults above.
type Config struct {
	// ID names this replica in repayment IDs; unique in the fleet.
	ID string
	// Share returns the number of live replicas (at least 1 is used).
	Share func() int
	// Settled reports whether Share's count can be relied on (Fleet.Settled);
	// until it can, a new local bucket starts bare (startsBare). Nil: always.
	Settled func() bool
	// Answered returns when the shared store last answered this replica
	// outside Acquire and Repay (Fleet.Answered: its heartbeats); zero
	// when never. Nil: never.
	Answered func() time.Time
	// MaxItems bounds the items tracked at once.
	MaxItems int
	// Probe is how soon a degraded item is first tried again; MaxProbe
	// bounds the backoff.
	Probe, MaxProbe time.Duration
	// Late reports whether this process runs late (see firstProbe; never
	// when nil).
	Late func() bool
	// Idle is how long an item whose debt is paid stays tracked.
	Idle time.Duration
	// RepayTimeout bounds one repayment call.
	RepayTimeout time.Duration
	// Workers bounds the repayments in flight.
	Workers int
	// Drain bounds the last repay pass Run makes once its context ends.
	Drain time.Duration
	// Outage is how long the shared store must fail every call of this
	// replica, answering none, before new local buckets start at their
	// share rather than bare (startsBare).
	Outage time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// Observer hears of local decisions, repayments and losses (none when
	// nil).
	Observer Observer
	// Log tells of debts lost when Run stops (nowhere when nil).
	Log *logrus.Entry
}

func (c Config) withDefaults() Config {
	if c.Share == nil {
		c.Share = func() int { return 1 }
	}
	if c.Settled == nil {
		c.Settled = func() bool { return true }
	}
	if c.Answered == nil {
		c.Answered = func() time.Time { return time.Time{} }
	}
	if c.MaxItems <= 0 {
		c.MaxItems = DefaultMaxItems
	}
	if c.Probe <= 0 {
		c.Probe = DefaultProbe
	}
	if c.MaxProbe < c.Probe {
		c.MaxProbe = max(DefaultMaxProbe, c.Probe)
	}
	if c.Idle <= 0 {
		c.Idle = DefaultIdle
	}
	if c.RepayTimeout <= 0 {
		c.RepayTimeout = DefaultRepayTimeout
	}
	if c.Drain <= 0 {
		c.Drain = DefaultDrain
	}
	if c.Outage <= 0 {
		c.Outage = DefaultOutage
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.Log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		c.Log = logrus.NewEntry(l)
	}
	return c
}

type nopObserver struct{}

func (nopObserver) Local(bool)                        {}
func (nopObserver) Items(int, int)                    {}
func (nopObserver) Repaid(string)                     {}
func (nopObserver) Lost(tokenbucket.Millitokens, int) {}

// Store decides on the shared store, and locally when it cannot (see the
// package documentation). It is safe for concurrent use; Run repays.
type Store struct {
	shared Shared
	seer   Seer // nil: local buckets start full
	cfg    Config

	mu      sync.Mutex
	items   map[cascade.Key]*item // guarded by mu
	tracked atomic.Int64          // len(items): the fast path reads it unlocked
	stamp   int64                 // the last repayment's stamp, unix µs (guarded by mu)
	// backedOff is set when a repayment failed, so that an answer of the
	// shared store sends the items that wait on a backoff at once
	// (answered).
	backedOff atomic.Bool
	decided   uint64 // local decisions made (guarded by mu)
	// failingMs is when the shared store began to fail this replica's
	// calls (unix ms): its first failure since it last answered one in
	// time; 0 while it answers (and before the first call).
	failingMs atomic.Int64
	wake      chan struct{}
}

// item is one bucket item tracked here: degraded, owed a debt, or recently
// decided locally. Guarded by Store.mu.
type item struct {
	key      cascade.Key
	degraded bool
	attempt  int   // failed tries since it degraded
	retryMs  int64 // when it may be tried again
	refuseMs int64 // until when a refusal of the shared store stands
	usedMs   int64 // its last local decision
	busy     bool  // a repayment of it is in flight
	limits   map[string]*limit
	// owed is the repayment in flight or to be retried, with its stamp:
	// it is sent again unchanged until it lands, and expires (dropped)
	// repaymentLife after it was made.
	owed    *cascade.Repayment
	owedExp int64 // unix ms
	// decisions counts the local decisions whose debits to it are owed,
	// repaying those of them in owed; owedBy is the last one counted.
	decisions, repaying int
	owedBy              uint64
}

// limit is one limit of a tracked item.
type limit struct {
	bucket tokenbucket.Limit // the shared limit
	part   portion           // the share of bucket local was made for
	local  tokenbucket.Limit // part of bucket
	state  tokenbucket.State // local's level
	// bare: made bare (startsBare) and not lifted since (limitOf).
	bare    bool
	pending tokenbucket.Millitokens
	// repaying is the part of pending in owed.
	repaying tokenbucket.Millitokens
}

// New returns a Store over shared. When shared implements Seer, local
// buckets start from what it last saw.
func New(shared Shared, cfg Config) *Store {
	s := &Store{shared: shared, cfg: cfg.withDefaults(), items: map[cascade.Key]*item{}, wake: make(chan struct{}, 1)}
	s.seer, _ = shared.(Seer)
	return s
}

var _ interface {
	Acquire(context.Context, *cascade.Plan) (cascade.Decision, error)
} = (*Store)(nil)

// Acquire decides plan on the shared store, or locally when one of its
// items is degraded or the shared store fails it. Its errors are the shared
// store's for a plan it cannot hold (cascade.ErrInvalid) and the caller's
// own cancellation.
func (s *Store) Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error) {
	if s.tracked.Load() > 0 {
		if dec, ok := s.decideIfDegraded(plan); ok {
			s.cfg.Observer.Local(dec.Admitted)
			return dec, nil
		}
	}
	dec, err := s.shared.Acquire(ctx, plan)
	if err == nil {
		s.heard()
		if s.tracked.Load() > 0 {
			s.follow(plan, &dec)
			s.answered()
		}
		return dec, nil
	}
	if errors.Is(err, cascade.ErrInvalid) || ctx.Err() != nil {
		return dec, err
	}
	s.failing()
	s.mu.Lock()
	landed := s.degrade(plan, err)
	dec = s.decideLocked(plan, landed)
	s.mu.Unlock()
	s.cfg.Observer.Local(dec.Admitted)
	s.kick()
	return dec, nil
}

// decideIfDegraded decides plan locally when an item of it is degraded,
// under one hold of the lock; false when none is.
func (s *Store) decideIfDegraded(plan *cascade.Plan) (cascade.Decision, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range plan.Debits {
		if it := s.items[plan.Debits[i].Key]; it != nil && it.degraded {
			return s.decideLocked(plan, nil), true
		}
	}
	return cascade.Decision{}, false
}

// degrade marks the items err names as failed (every item of plan when it
// names none) and returns those whose write may have landed.
func (s *Store) degrade(plan *cascade.Plan, err error) map[cascade.Key]bool {
	now := s.nowMs()
	mark := func(k cascade.Key) {
		if it := s.track(k, now); it != nil && !it.degraded {
			it.degraded, it.attempt, it.retryMs = true, 0, now+s.firstProbe().Milliseconds()
		}
	}
	failed := cascade.ItemErrors(err)
	if len(failed) == 0 {
		for i := range plan.Debits {
			mark(plan.Debits[i].Key)
		}
		return nil
	}
	var landed map[cascade.Key]bool
	for _, f := range failed {
		mark(f.Key)
		if errors.Is(f.Err, cascade.ErrMayHaveLanded) {
			if landed == nil {
				landed = map[cascade.Key]bool{}
			}
			landed[f.Key] = true
		}
	}
	return landed
}

// track returns k's item, tracking it if it is not; nil when MaxItems are
// tracked already.
func (s *Store) track(k cascade.Key, now int64) *item {
	if it := s.items[k]; it != nil {
		return it
	}
	if len(s.items) >= s.cfg.MaxItems {
		return nil
	}
	it := &item{key: k, limits: map[string]*limit{}, usedMs: now}
	s.items[k] = it
	s.tracked.Store(int64(len(s.items)))
	return it
}

// follow brings the local buckets of tracked items down to what the shared
// store just decided (this replica's share of its remaining tokens),
// and records its refusals.
func (s *Store) follow(plan *cascade.Plan, dec *cascade.Decision) {
	now := s.nowMs()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range plan.Debits {
		d := &plan.Debits[i]
		it := s.items[d.Key]
		if it == nil || i >= len(dec.Statuses) {
			continue
		}
		st := &dec.Statuses[i]
		if st.Contended {
			continue // too busy to decide: says nothing of the bucket
		}
		if !st.OK && d.Role == cascade.Enforce {
			it.refuseMs = max(it.refuseMs, now+refusalWindow.Milliseconds())
		}
		if l := it.limits[d.Limit]; l != nil && l.bucket == d.Bucket {
			l.lower(st.Remaining, now)
		}
	}
}

// lower brings l's local bucket down to its share of shared, what the
// shared bucket holds, when that is less; never up: the shared store's
// answer lags what other replicas admitted locally and have not repaid
// yet, and the local bucket refills on its own.
func (l *limit) lower(shared tokenbucket.Millitokens, now int64) {
	share := l.part.of(shared)
	if share < l.local.Tokens(l.state, now) {
		l.state = l.local.Holding(share, now)
	}
}

func (s *Store) nowMs() int64 { return s.cfg.Now().UnixMilli() }

// heard records that the shared store answered a call in time. It reads
// the shared word at every decision and writes it only after a failure.
func (s *Store) heard() {
	if s.failingMs.Load() != 0 {
		s.failingMs.Store(0)
	}
}

// failing records that the shared store failed a call.
func (s *Store) failing() { s.failingMs.CompareAndSwap(0, s.nowMs()) }

// startsBare reports whether a new local bucket starts bare at now:
// holding only the request that makes it, the refill alone being this
// replica's (a limit of a few a minute still admits that one request on
// each replica, so a new API key is not refused for a slow call). While
// the fleet is not counted yet (Config.Settled) no share of the burst is
// known to be this replica's; and until the shared store has answered
// none of this replica's calls (nor heartbeats, Config.Answered) for an
// Config.Outage, it may be giving the bucket's tokens to the replicas it
// answers, whatever this replica last saw of them: a share of a last
// image taken then would be admitted twice, here and there. A bucket made
// bare is lifted to its share of that image (full with none) once the
// outage is (limitOf).
func (s *Store) startsBare(now int64) bool {
	if !s.cfg.Settled() {
		return true
	}
	since := s.failingMs.Load()
	if since == 0 {
		return true // answering, or no call made yet
	}
	if a := s.cfg.Answered(); !a.IsZero() {
		since = max(since, a.UnixMilli())
	}
	return now-since < s.cfg.Outage.Milliseconds()
}

func (s *Store) share() int { return max(s.cfg.Share(), 1) }

// kick wakes Run.
func (s *Store) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
