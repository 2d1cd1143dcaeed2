package dynamo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Defaults applied by NewStore to zero Config fields (Config.WithDefaults).
// The binary's settings (BACKEND_TIMEOUT, CONFIG_CACHE_TTL,
// REJECTION_CACHE_SIZE, NAMESPACE, DYNAMODB_TABLE, AWS_REGION) default to
// these same constants.
const (
	// DefaultTimeout is the budget of one decision (Config.Timeout).
	DefaultTimeout = 15 * time.Millisecond
	// DefaultConfigCacheTTL is how long stored limits and entity records
	// are trusted (Config.ConfigCacheTTL).
	DefaultConfigCacheTTL = 60 * time.Second
	// DefaultRejectionCacheSize bounds the rejection cache
	// (Config.RejectionCacheSize).
	DefaultRejectionCacheSize = 100000
	// DefaultNamespace is the namespace of a store whose Config.Namespace
	// is empty.
	DefaultNamespace = "default"
	// DefaultTable is the table the binary and its admin commands use when
	// DYNAMODB_TABLE is unset. NewStore does not apply it: a store names
	// its table.
	DefaultTable = "dynalimit"
	// DefaultRegion is the region NewClient uses when given none.
	DefaultRegion = "us-east-1"

	// RejectionCacheOff, as Config.RejectionCacheSize, disables the
	// rejection cache (any negative size does).
	RejectionCacheOff = -1

	// DefaultShardWriteRate is Config.ShardWriteRate's default: 70% of
	// the 1,000 writes a second one DynamoDB item takes.
	DefaultShardWriteRate = 700
	// DefaultShardMergeRate is Config.ShardMergeRate's default.
	DefaultShardMergeRate = 50
	// DefaultShardMergeAfter is Config.ShardMergeAfter's default.
	DefaultShardMergeAfter = 5 * time.Minute

	// DefaultUsageRetention is how long a usage snapshot lives past the end
	// of its window (Config.UsageRetention, USAGE_RETENTION): thirteen
	// months and a bit, so a monthly snapshot outlives a year's comparison.
	DefaultUsageRetention = 400 * 24 * time.Hour

	// MaxShards bounds shard doubling (a doubling is one transaction over
	// every old and new shard, at most 100 items).
	MaxShards = 32

	// MaxValueBytes bounds an entity or resource value: a longer one is an
	// invalid request (cascade.ErrInvalid), not something to store.
	MaxValueBytes = 16 << 10

	// MinBucketTTL is the least time ahead that a write of a bucket item
	// sets its ttl to (see Expiry in the package's doc).
	MinBucketTTL = 7 * 24 * time.Hour

	maxImages    = 100000
	minBucketTTL = MinBucketTTL
	// costBudget is the least budget of a plan of charges and refunds.
	costBudget = time.Second
	// contendedRetry is the retry-after of a decision refused because its
	// own key was too busy to decide it within its budget.
	contendedRetry = 10 * time.Millisecond
)

// Config configures a Store.
type Config struct {
	// Table is the DynamoDB table name.
	Table string
	// Namespace is the deployment's namespace (DefaultNamespace when
	// empty): the namespace of every plan key, admin call, entity and scope
	// whose own Namespace is empty. Buckets, stored limits, entities and
	// audit records of one namespace are invisible to a store of another on
	// the same table, and so are the store's caches of them.
	Namespace string
	// Timeout is the budget of one decision, every DynamoDB call within it
	// (BACKEND_TIMEOUT).
	Timeout time.Duration
	// ConfigCacheTTL is how long a replica trusts stored limits and entity
	// records before reading them again: a stored limit applies to every
	// decision made this long or more after it was stored; an entity
	// record lives this ±10%.
	ConfigCacheTTL time.Duration
	// RejectionCacheSize bounds the local rejection cache (entries): zero
	// means DefaultRejectionCacheSize, a negative size (RejectionCacheOff)
	// disables it.
	RejectionCacheSize int
	// ThrottleFails makes an item that DynamoDB kept throttling through a
	// decision's budget fail that decision (an error wrapping ErrThrottled
	// and ErrUnavailable, in a cascade.ItemError) rather than refuse it as
	// contended: for a caller that decides such items another way
	// (ON_UNAVAILABLE=local decides them on the replica's share).
	ThrottleFails bool
	// UsageRetention is how long a usage snapshot lives past the end of
	// its window (ApplyUsage); zero means DefaultUsageRetention.
	UsageRetention time.Duration
	// ShardWriteRate is the rate of this replica's writes to a bucket, per
	// shard item and second, at which the store doubles the bucket's shard
	// count before DynamoDB throttles it (measured over a second); zero
	// means DefaultShardWriteRate, a negative rate turns it off (a doubling
	// then follows throttling only).
	ShardWriteRate float64
	// ShardMergeRate is the rate, per shard item and second once halved,
	// below which a sharded bucket's writes must stay for ShardMergeAfter
	// before the store halves its shard count; zero means
	// DefaultShardMergeRate, a negative rate turns merging off.
	ShardMergeRate float64
	// ShardMergeAfter is how long a bucket stays below ShardMergeRate
	// before it is merged; zero means DefaultShardMergeAfter.
	ShardMergeAfter time.Duration
}

// WithDefaults returns c with every zero field but Table at its default:
// DefaultTimeout, DefaultConfigCacheTTL, DefaultRejectionCacheSize,
// DefaultNamespace, DefaultUsageRetention, DefaultShardWriteRate,
// DefaultShardMergeRate and DefaultShardMergeAfter. A negative
// RejectionCacheSize, ShardWriteRate or ShardMergeRate stays (off).
// NewStore applies it.
func (c Config) WithDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ConfigCacheTTL <= 0 {
		c.ConfigCacheTTL = DefaultConfigCacheTTL
	}
	if c.RejectionCacheSize == 0 {
		c.RejectionCacheSize = DefaultRejectionCacheSize
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.UsageRetention <= 0 {
		c.UsageRetention = DefaultUsageRetention
	}
	if c.ShardWriteRate == 0 {
		c.ShardWriteRate = DefaultShardWriteRate
	}
	if c.ShardMergeRate == 0 {
		c.ShardMergeRate = DefaultShardMergeRate
	}
	if c.ShardMergeAfter <= 0 {
		c.ShardMergeAfter = DefaultShardMergeAfter
	}
	return c
}

// Why a decision was refused for contention (Observer.Contended).
const (
	// ContendedQueued: still queued behind its item's write in flight
	// when its budget ended.
	ContendedQueued = "queued"
	// ContendedRaced: its batch lost races to other writers until the
	// budget ran out.
	ContendedRaced = "raced"
	// ContendedThrottled: DynamoDB kept throttling its item.
	ContendedThrottled = "throttled"
	// ContendedRead: its budget ended waiting for a read of its item or
	// its stored limits that other decisions started.
	ContendedRead = "read"
	// ContendedUnreadable: its item holds a level this schema cannot read
	// (written by something else). Refused: an unreadable bucket must not
	// become an admission under ON_UNAVAILABLE=allow.
	ContendedUnreadable = "unreadable"
)

// Observer receives the store's own events (the DynamoDB calls themselves are
// observed by wrapping the API). Implementations must be safe for concurrent
// use and must not block.
type Observer interface {
	// ShardDoubled is called after the store doubled a bucket's shard
	// count (DynamoDB throttled it, or its write rate neared the ceiling).
	ShardDoubled()
	// ShardMerged is called after the store halved an idle bucket's shard
	// count.
	ShardMerged()
	// RejectionCacheHit is called when a decision was answered from the local
	// rejection cache without a DynamoDB call.
	RejectionCacheHit()
	// Contended is called when a decision is refused because its own bucket
	// was too busy to decide it within its budget (never an outage), with
	// why: ContendedQueued, ContendedRaced, ContendedThrottled or
	// ContendedRead.
	Contended(reason string)
	// Batched is called once per conditional write of decisions, with the
	// number of decisions it carried and the least cascade.Debit.Depth of
	// their debits: 0 when the item is a request's own bucket for at least
	// one of them, 1 or more when it is only a parent's (an ancestor's
	// bucket that the debits of its descendants cascade to).
	Batched(decisions, depth int)
	// ClockBehind is called with the largest amount, over the last minute,
	// by which this replica's clock was behind the clock of another replica
	// that wrote a bucket item it received (at least that much; zero when
	// it is ahead or in step), each time that amount changes.
	ClockBehind(d time.Duration)
	// GaveBack is called once per give-back of a refused plan (one per
	// bucket item whose part consumed) when it ends, with how:
	// GiveBackApplied, GiveBackAppliedRetry, GiveBackDroppedAge,
	// GiveBackDroppedBound, GiveBackDroppedClosed, GiveBackMoot or
	// GiveBackUnknown.
	GaveBack(result string)
	// GiveBacksPending is called with the number of give-backs waiting to
	// be retried in the background each time it changes.
	GiveBacksPending(n int)
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (default time.Now). Every reading of the
// time that a decision or its give-backs depend on goes through it: the
// levels of buckets, the clocks written to items, the age of a pending
// give-back and the budget of a part re-queued after contention. What the
// store waits for (the deadlines of its calls, backoffs, the schedule of
// background retries) runs on the runtime's timers.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithLogger sets the store's logger.
func WithLogger(l *logrus.Entry) Option { return func(s *Store) { s.log = l } }

// WithPrincipal sets who the audit records the store writes name as
// having made the change (admin.AuditRecord.Principal): an operator's name, a
// role. Empty (the default) records none.
func WithPrincipal(p string) Option { return func(s *Store) { s.principal = p } }

// WithObserver sets the observer of the store's events.
func WithObserver(o Observer) Option { return func(s *Store) { s.obs = o } }

// WithCallContext sets how the context of a DynamoDB call that the store
// makes on its own derives from the decisions it serves. Bucket writes,
// cold reads and give-backs run on the store's contexts, not a caller's: one
// conditional write carries every decision queued on its item, one read
// serves every decision waiting for it, and either outlives callers that
// gave up. f gets the call's context and the contexts of the decisions the
// call serves, in arrival order (the one that started it first), and
// returns the context the call runs on. It may add values only (for
// example, to make the call's trace span a child of the first decision's
// and link it to the others); the call's deadline and cancellation stay the
// store's. A read can serve decisions that arrive after it started: to hear
// of them, f returns a context made by WithCallJoin. f must be quick and
// must not call the store. The default returns call unchanged.
func WithCallContext(f func(call context.Context, decisions []context.Context) context.Context) Option {
	return func(s *Store) { s.callCtx = f }
}

type joinKey struct{}

// WithCallJoin returns a copy of call, a context a WithCallContext hook
// returns, that tells join of each decision that joins the call after it
// started: a cold read that decisions arriving later wait for too (the
// decisions of a batch write are all known when it starts). join gets the
// decision's context, from the decision's goroutine (or, for one that
// joined while the hook was making the call's context, from the goroutine
// that started the call), possibly after the call's DynamoDB requests
// ended; it must be safe for concurrent use and must not block.
func WithCallJoin(call context.Context, join func(decision context.Context)) context.Context {
	return context.WithValue(call, joinKey{}, join)
}

// joinOf returns the join function ctx carries (WithCallJoin), or nil.
func joinOf(ctx context.Context) func(decision context.Context) {
	join, _ := ctx.Value(joinKey{}).(func(decision context.Context))
	return join
}

// callContext derives a call's context from the decisions it serves (see
// WithCallContext). A hook that panics leaves call as it is.
func (s *Store) callContext(call context.Context, decisions []context.Context) (ctx context.Context) {
	if s.callCtx == nil || len(decisions) == 0 {
		return call
	}
	defer reader{s}.recoverHook("call-context", func() { ctx = call })
	return s.callCtx(call, decisions)
}

type nopObserver struct{}

func (nopObserver) ShardDoubled()      {}
func (nopObserver) ShardMerged()       {}
func (nopObserver) RejectionCacheHit() {}
func (nopObserver) Contended(string)   {}
func (nopObserver) Batched(int, int)   {}

func (nopObserver) ClockBehind(time.Duration) {}
func (nopObserver) GaveBack(string)           {}
func (nopObserver) GiveBacksPending(int)      {}

// Store is the DynamoDB store. It is safe for concurrent use.
//
// Its jobs are shared with small types that embed it, one per job (cacher,
// reader, batchWriter, sharder, doubler, pacer, settler, inspector, giveBacker): a
// method of Store takes one as cacher{s}, a method of another one converts
// its receiver, cacher(s).
type Store struct {
	tbl *Table // the table, as every room reaches it
	api API
	cfg Config
	now func() time.Time
	log *logrus.Entry
	obs Observer
	// callCtx derives the context of a call the store makes on its own
	// (WithCallContext); nil leaves it as it is.
	callCtx func(call context.Context, decisions []context.Context) context.Context
	// principal is who the audit records this store writes name
	// (WithPrincipal).
	principal string

	// life ends at Close: it bounds the work that outlives a caller (batch
	// writes, cold reads, compensations), and wg waits for that work.
	life   context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool

	mu     sync.Mutex
	caches // guarded by mu

	lanes lanes
	home  uint64                // where this replica's home shards of hot buckets start (pace.go)
	place atomic.Pointer[place] // its rank in the fleet, from its heartbeats (fleet.go)
	reads flights               // reads of items and records in flight, shared (flight.go)
	gb    givebacks             // give-backs retried in the background (giveback.go)
	rates writeRates            // write rates that double or merge shards (resize.go)
	skew  skewWatch             // clocks of other replicas (clock.go)
}

var _ interface {
	Acquire(context.Context, *cascade.Plan) (cascade.Decision, error)
} = (*Store)(nil)

// NewStore returns a store on cfg.Table. It checks the table's schema
// version record (written by CreateTable) and fails with ErrSchema when it is
// missing or different.
func NewStore(ctx context.Context, api API, cfg Config, opts ...Option) (*Store, error) {
	if cfg.Table == "" {
		return nil, errors.New("dynamo: config: table name is empty")
	}
	cfg = cfg.WithDefaults()
	s := &Store{
		api: api, cfg: cfg, now: time.Now, obs: nopObserver{},
		caches: newCaches(maxImages, cfg.RejectionCacheSize),
	}
	s.lanes.m = map[string]*lane{}
	s.home = rand.Uint64()
	s.reads.m = map[string]*flight{}
	s.gb.init()
	for _, o := range opts {
		o(s)
	}
	s.rates.m = newLRU[*writeRate]("load", s.images.capacity)
	if s.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		s.log = logrus.NewEntry(l)
	}
	s.log = s.log.WithField("component", "dynamo")
	s.tbl = &Table{API: api, Name: cfg.Table, Namespace: cfg.Namespace, Timeout: cfg.Timeout, Now: s.now, Log: s.log, Principal: s.principal}
	s.life, s.stop = context.WithCancel(context.Background())
	if err := s.checkVersion(ctx); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// Table returns the handle of the store's table, for the rooms that share
// it (pkg/dynamo/admin, pkg/dynamo/usage).
func (s *Store) Table() *Table { return s.tbl }

// Config returns the store's configuration, defaults applied.
func (s *Store) Config() Config { return s.cfg }

// Close stops the store. Give-backs still pending are tried once more
// within a short deadline (4×Config.Timeout, at least 250 ms), and dropped
// if they do not land then; then work in flight (batched writes, reads that
// fill the caches, give-backs) is cancelled and waited for. No goroutine of
// the store outlives Close; calls after Close fail.
func (s *Store) Close() error {
	giveBacker{s}.closeGiveBacks()
	s.lanes.mu.Lock()
	s.reads.mu.Lock()
	s.closed.Store(true) // under both locks: no lane or flight starts after this
	s.reads.mu.Unlock()
	s.lanes.mu.Unlock()
	s.stop()
	s.wg.Wait()
	return nil
}

var errClosed = errors.New("dynamo: store is closed")

// errContended: a decision's budget ran out waiting on work in flight for
// its own keys (a shared read); it is refused, never an outage.
var errContended = errors.New("dynamo: contended")

// errOutcomeUnknown: a write that charges or refunds went unanswered, so it
// may have landed; it is not written again (a second write could apply it
// twice), and the caller is told DynamoDB did not answer.
var errOutcomeUnknown = fmt.Errorf("dynamo: write unanswered, outcome unknown: %w: %w", ErrUnavailable, cascade.ErrMayHaveLanded)

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// call bounds one DynamoDB call by the configured timeout.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

func (s *Store) ns(k cascade.Key) string {
	if k.Namespace == "" {
		return s.cfg.Namespace
	}
	return k.Namespace
}

// Acquire decides plan all-or-nothing (see cascade.Decide) against the
// table. Being over limit is a decision, and so is a refusal because the
// plan's own bucket was too busy to decide it within Config.Timeout
// (retry-after contendedRetry). An error means DynamoDB did not answer
// (wrapping ErrUnavailable), or the plan cannot be stored (wrapping
// cascade.ErrInvalid).
func (s *Store) Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error) {
	if s.closed.Load() {
		return cascade.Decision{}, errClosed
	}
	if plan == nil || len(plan.Debits) == 0 {
		return cascade.Decision{Admitted: true, Statuses: []cascade.Status{}}, nil
	}
	ctx, cancel := s.budget(ctx, plan)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return cascade.Decision{}, fmt.Errorf("dynamo: acquire: %w: %w", ErrUnavailable, err)
	}
	if err := validPlan(plan); err != nil {
		return cascade.Decision{}, err
	}
	p := &cascade.Plan{Debits: append([]cascade.Debit(nil), plan.Debits...)}
	for i := range p.Debits {
		// One item, one key: a debit naming the store's namespace and one
		// naming none are the same bucket.
		p.Debits[i].Key.Namespace = s.ns(p.Debits[i].Key)
	}
	buckets := s.bucketsOf(p)
	if err := s.loadConfigs(ctx, p, buckets); err != nil {
		if errors.Is(err, errContended) {
			s.obs.Contended(ContendedRead)
			return contended(&part{debits: p.Debits}, nil, 0), nil
		}
		return cascade.Decision{}, err
	}
	if dec, ok := (cacher{s}).fromRejectionCache(p, buckets); ok {
		s.obs.RejectionCacheHit()
		return dec, nil
	}
	dec, err := s.decide(ctx, p, buckets)
	s.demand.Debited(p, &dec, err, s.nowMs())
	if err != nil {
		callerKeys(err, plan, p)
	}
	return dec, err
}

// callerKeys names each item of err's cascade.ItemErrors by its key as the
// caller's plan gave it (p is the plan with the store's namespace filled
// in), so that the caller finds its own keys.
func callerKeys(err error, plan, p *cascade.Plan) {
	for _, e := range cascade.ItemErrors(err) {
		for i := range p.Debits {
			if p.Debits[i].Key == e.Key {
				e.Key = plan.Debits[i].Key
				break
			}
		}
	}
}

// budget bounds the decision of plan. A plan that only charges and refunds
// reports cost already spent or returned: nobody waits on its answer
// (Envoy's stream-done call ignores it, and may give up first), and losing
// it would undercount. So it is decided off the caller's cancellation, under
// a budget of its own of costBudget (at least 4×Timeout), within which a
// queue or lost races do not drop it. Every other plan has Timeout.
func (s *Store) budget(ctx context.Context, plan *cascade.Plan) (context.Context, context.CancelFunc) {
	for i := range plan.Debits {
		if op := plan.Debits[i].Op; op != cascade.Charge && op != cascade.Refund {
			return context.WithTimeout(ctx, s.cfg.Timeout)
		}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), max(4*s.cfg.Timeout, costBudget))
}

// validPlan refuses what no bucket item can hold.
func validPlan(p *cascade.Plan) error {
	for i := range p.Debits {
		d := &p.Debits[i]
		if err := d.Bucket.Validate(); err != nil {
			return fmt.Errorf("dynamo: debit %d (%s): %w: %w", i, d.Limit, cascade.ErrInvalid, err)
		}
		for _, v := range [...]struct{ what, s string }{{"entity", d.Key.Entity}, {"resource", d.Key.Resource}, {"namespace", d.Key.Namespace}, {"limit name", d.Limit}} {
			if len(v.s) > MaxValueBytes {
				return fmt.Errorf("dynamo: debit %d: %s of %d bytes, at most %d: %w", i, v.what, len(v.s), MaxValueBytes, cascade.ErrInvalid)
			}
		}
	}
	return nil
}

// decide sends every part of p (its debits on one bucket item) to its
// item's lane, waits for them, and applies the plan's admission rule; a plan
// refused after some parts debited has those debits given back.
func (s *Store) decide(ctx context.Context, p *cascade.Plan, buckets []bucket) (cascade.Decision, error) {
	parts := s.partsOf(p, buckets)
	for _, pt := range parts {
		pt.from = ctx
	}
	if len(parts) == 1 {
		pt := parts[0]
		s.await(ctx, pt)
		if pt.err != nil {
			return cascade.Decision{}, pt.itemError()
		}
		stampShards(&pt.dec, parts)
		return pt.dec, nil
	}
	first, rest := s.gated(parts)
	if len(first) > 0 {
		s.awaitAll(ctx, first)
		if stopped(first) {
			// Refused (or failed) on an item that refused recently: the
			// other items are not written, only to be given back.
			s.notSent(rest)
			rest = nil
		}
	}
	s.awaitAll(ctx, rest)
	dec := cascade.Decision{Statuses: make([]cascade.Status, len(p.Debits))}
	var errs []error
	for _, pt := range parts {
		if pt.err != nil {
			errs = append(errs, pt.itemError())
			continue
		}
		for j, i := range pt.idx {
			dec.Statuses[i] = pt.dec.Statuses[j]
		}
	}
	if len(errs) == 0 {
		if dec.Admitted = cascade.Admit(p.Debits, dec.Statuses); dec.Admitted {
			stampShards(&dec, parts)
			return dec, nil
		}
	}
	// Refused, or some part could not be decided: give back what the parts
	// that went through consumed.
	var comp []*part
	for _, pt := range parts {
		if pt.err == nil && pt.dec.Admitted {
			if c := pt.compensation(); c != nil {
				comp = append(comp, c)
			}
		}
	}
	s.compensate(comp)
	if whole, ok := refusedWhole(p, parts); ok {
		// Statuses as cascade.Decide gives them for the whole plan refused
		// (waits for every debit a retry makes of a bucket).
		dec = whole
	} else {
		for _, c := range comp {
			c.restored(&dec)
		}
	}
	if len(errs) > 0 {
		return cascade.Decision{}, errors.Join(errs...)
	}
	stampShards(&dec, parts)
	return dec, nil
}

// stampShards reports in each status of dec (a plan's decision, or a
// part's: their statuses follow the plan's debits) the shard that decided
// its debit, the last its part was queued on.
func stampShards(dec *cascade.Decision, parts []*part) {
	for _, pt := range parts {
		for _, i := range pt.idx {
			dec.Statuses[i].Shard = pt.shard
		}
	}
}

// awaitAll sends parts to their lanes together and waits for every one.
func (s *Store) awaitAll(ctx context.Context, parts []*part) {
	if len(parts) == 1 {
		s.await(ctx, parts[0])
		return
	}
	var wg sync.WaitGroup
	for _, pt := range parts {
		wg.Go(func() { s.await(ctx, pt) })
	}
	wg.Wait()
}

// compensate gives back consumed amounts: every part is tried, each in its
// item's lane under a budget of its own (the decision's may be spent), and
// tried again while that lasts. A give-back that did not land and can land
// later is kept, as the same refund, and retried in the background (keep);
// each one that ended is counted (Observer.GaveBack). The parts given back
// have err nil.
func (s *Store) compensate(comp []*part) {
	if len(comp) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.life, 4*s.cfg.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range comp {
		wg.Go(func() {
			// A give-back that DynamoDB did not take is tried again while
			// the budget lasts: it returns tokens already accepted. One
			// whose write went unanswered may have landed, and is not.
			for attempt := 0; ; attempt++ {
				s.await(ctx, c)
				if giveBackResult(c.err, false) != "" || !Sleep(ctx, Backoff(attempt)) {
					return
				}
				c.choose(c.shard)
			}
		})
	}
	wg.Wait()
	refused := s.now()
	for _, c := range comp {
		if res := giveBackResult(c.err, false); res != "" {
			giveBacker{s}.gaveBack(res, c, c.err)
			continue
		}
		s.log.WithError(c.err).WithField("item", c.pk).Debug("a give-back of a refused plan did not land within its budget: retrying it in the background")
		giveBacker{s}.keep(c.again(), refused)
	}
}

// refusedWhole decides p, refused part by part, once more as one plan on
// the levels each part was decided on: the decision cascade.Decide gives a
// refused plan, statuses and waits included. It reports false when a part
// was not decided by a batch (contention, the rejection cache).
func refusedWhole(p *cascade.Plan, parts []*part) (cascade.Decision, bool) {
	q := &cascade.Plan{Debits: make([]cascade.Debit, len(p.Debits))}
	slot := make([]int, len(p.Debits))
	var levels []tokenbucket.Level
	var now int64
	for _, pt := range parts {
		if pt.err != nil || pt.start == nil {
			return cascade.Decision{}, false
		}
		base := len(levels)
		levels = append(levels, pt.start.levels...)
		for j, i := range pt.idx {
			q.Debits[i] = pt.start.plan.Debits[j]
			q.Debits[i].Role = p.Debits[i].Role
			slot[i] = base + pt.start.slot[j]
		}
		now = max(now, pt.start.now)
	}
	dec := cascade.Decide(q, slot, levels, now)
	if dec.Admitted {
		return cascade.Decision{}, false
	}
	for i := range dec.Statuses {
		dec.Statuses[i].Bucket = p.Debits[i].Bucket
	}
	return dec, true
}
