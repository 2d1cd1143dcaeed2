package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Defaults of Config's zero fields.
const (
	// DefaultTimeout bounds one call to Redis: the wait for a connection,
	// the write and the read.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultMaxInFlight bounds the calls in flight at once.
	DefaultMaxInFlight = 64
	// busyRetry is the retry-after of a decision refused because its key's
	// lane was full.
	busyRetry = 10 * time.Millisecond
	// maxRestates bounds the tries of a plan whose stored levels were
	// written under another limit.
	maxRestates = 3
)

// Config configures a Store.
type Config struct {
	// Namespace is the deployment's namespace: the keys of a plan whose
	// key names none are in it.
	Namespace string
	// Timeout bounds one call to Redis (DefaultTimeout).
	Timeout time.Duration
	// MaxInFlight bounds the calls to Redis in flight at once
	// (DefaultMaxInFlight); a plan that waits longer than Timeout for one
	// fails as unavailable.
	MaxInFlight int
	// UsageRetention, when positive, keeps usage history: every admitted
	// decision (and settlement, and repayment) adds what it consumed to
	// its entity's hourly, daily and monthly usage in the same call, each
	// window kept this long past its end (USAGE_RETENTION).
	UsageRetention time.Duration
	// ConfigCacheTTL is how long a replica trusts the stored limits and
	// entity records it read (CONFIG_CACHE_TTL; DefaultConfigCacheTTL).
	ConfigCacheTTL time.Duration
	// Observer hears of each call of the decision script (none when nil).
	Observer Observer
	// Now, when set, is the clock the store decides at instead of Redis's
	// own (TIME): a test's clock. Production stores leave it nil.
	Now func() time.Time
}

// Observer hears of the store's calls of the decision script. It must be
// safe for concurrent use and must not block.
type Observer interface {
	// Call is told of one call: its outcome (CallOK, CallTimeout,
	// CallError, CallBusy), how many plans it carried and how long it
	// took.
	Call(outcome string, plans int, took time.Duration)
}

// Call outcomes (Observer.Call).
const (
	CallOK      = "ok"
	CallTimeout = "timeout" // no answer within Config.Timeout
	CallError   = "error"   // Redis refused it, or the connection failed
	CallBusy    = "busy"    // no slot among Config.MaxInFlight within Config.Timeout
)

type nopObserver struct{}

func (nopObserver) Call(string, int, time.Duration) {}

// Store decides plans on bucket hashes in Redis (see the package doc).
// It is safe for concurrent use.
type Store struct {
	client atomic.Pointer[rueidis.Client] // nil until attached
	ready  chan struct{}                  // closed once attached
	once   sync.Once
	cfg    Config
	seen   seen
	keys   keyspace
	lanes  lanes
	slots  chan struct{}
	closed chan struct{}
	close  sync.Once
	wg     sync.WaitGroup
	// skewMs is Redis's clock less this process's, as last seen (ms).
	skewMs atomic.Int64
	// cache holds the stored limits and entity records read (resolve.go).
	cache records
	// chains names its keys' hash tags (chain.go).
	chains chains
}

// New returns a store on client, attached. The caller keeps client and
// closes it after Close.
func New(client rueidis.Client, cfg Config) *Store {
	s := Open(cfg)
	s.set(client)
	return s
}

// Open returns a store with no client yet: until Attach gives it one, a
// call waits for it within Config.Timeout and then fails as unavailable
// (a replica starts before its Redis answers).
func Open(cfg Config) *Store {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	s := &Store{
		ready: make(chan struct{}), cfg: cfg, keys: keyspace{ns: cfg.Namespace},
		lanes: lanes{m: map[string]*lane{}},
		slots: make(chan struct{}, cfg.MaxInFlight), closed: make(chan struct{}),
	}
	s.chains.keys = s
	return s
}

// Attach gives the store its client, once the scripts are loaded on it
// (so that the first decision does not carry them). The caller keeps c
// and closes it after Close. A store attached before keeps its client.
func (s *Store) Attach(ctx context.Context, c rueidis.Client) error {
	cctx, cancel := context.WithTimeout(ctx, max(s.cfg.Timeout, time.Second))
	defer cancel()
	for _, r := range c.DoMulti(cctx, c.B().ScriptLoad().Script(decideSource).Build(), c.B().ScriptLoad().Script(beatSource).Build()) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("redisstore: loading the scripts: %w", classify(err))
		}
	}
	s.set(c)
	return nil
}

// set makes c the store's client; false when it had one.
func (s *Store) set(c rueidis.Client) bool {
	if !s.client.CompareAndSwap(nil, &c) {
		return false
	}
	s.once.Do(func() { close(s.ready) })
	return true
}

// Attached is closed once the store has its client.
func (s *Store) Attached() <-chan struct{} { return s.ready }

// errNotConnected is the failure of a call made before the store had its
// client, after waiting Config.Timeout for it.
var errNotConnected = fmt.Errorf("redisstore: not connected to Redis yet: %w", ErrUnavailable)

// conn returns the client, waiting for it within Config.Timeout.
func (s *Store) conn() (rueidis.Client, error) {
	if c := s.client.Load(); c != nil {
		return *c, nil
	}
	t := time.NewTimer(s.cfg.Timeout)
	defer t.Stop()
	select {
	case <-s.ready:
		return *s.client.Load(), nil
	case <-t.C:
		return nil, errNotConnected
	case <-s.closed:
		return nil, ErrClosed
	}
}

// Close stops the store: calls waiting for a slot fail, and it returns
// once every lane's runner has.
func (s *Store) Close() error {
	s.close.Do(func() { close(s.closed) })
	s.wg.Wait()
	return nil
}

// Acquire decides p at Redis's clock: admitted whole or not at all, in one
// call of the script for the plans waiting on the same first bucket. Each
// debit's limit is first replaced by the one of its name stored at the
// most specific scope of its item (entity and resource, entity, resource,
// system), if any: Status.Bucket is the limit applied.
func (s *Store) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	return s.acquire(ctx, p, true)
}

// acquire is Acquire, resolving the stored limits when resolve is set.
func (s *Store) acquire(ctx context.Context, p *cascade.Plan, resolve bool) (cascade.Decision, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Decision{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	if p == nil {
		return cascade.Decision{}, fmt.Errorf("redisstore: acquire: nil plan: %w", cascade.ErrInvalid)
	}
	if len(p.Debits) == 0 {
		return cascade.Decision{Admitted: true, Statuses: []cascade.Status{}}, nil
	}
	debits := p.Debits
	if resolve {
		var err error
		if debits, err = s.resolve(ctx, debits); err != nil {
			return cascade.Decision{}, err
		}
	}
	if err := validate(debits); err != nil {
		return cascade.Decision{}, err
	}
	parts, err := s.slotParts(ctx, debits, nil)
	if err != nil {
		return cascade.Decision{}, err
	}
	if len(parts) > 1 {
		return acquireParts(ctx, debits, parts)
	}
	return s.decide(ctx, &job{kind: kindDecide, debits: debits, tags: parts[0].tags})
}

// validate refuses a debit whose limit no store can hold.
func validate(debits []cascade.Debit) error {
	for i := range debits {
		if err := debits[i].Bucket.Validate(); err != nil {
			return fmt.Errorf("redisstore: debit %d of %s: %w: %w", i, debits[i].Limit, cascade.ErrInvalid, err)
		}
	}
	return nil
}

// decide runs j until the script decides it: again, restated, when its
// stored levels were written under other limits, and at Redis's time when
// the calendar clock it was sent with was off.
func (s *Store) decide(ctx context.Context, j *job) (cascade.Decision, error) {
	key := j.lane(s.keys)
	for try := 0; ; try++ {
		j.state.Store(queued)
		if err := s.submit(ctx, key, j); err != nil {
			if errors.Is(err, errQueueFull) && j.kind == kindDecide {
				// Too many decisions wait on this key: contention,
				// refused as busy, never ON_UNAVAILABLE (which may admit).
				return cascade.Busy(j.debits, busyRetry), nil
			}
			return cascade.Decision{}, err
		}
		r := &j.reply
		switch {
		case r.status == "x" && try < maxRestates:
			if err := j.restated(r); err != nil {
				return cascade.Decision{}, err
			}
			continue
		case r.status == "c" && try < maxRestates:
			continue // the clock estimate is now Redis's
		case r.status == "u":
			return cascade.Decision{}, errDuplicate
		case len(r.status) == 2 && r.status[0] == j.kind:
			return s.decision(j)
		}
		return cascade.Decision{}, fmt.Errorf("%w: %q after %d tries", errReply, r.status, try+1)
	}
}

// lane is the key whose lane j waits in: its first bucket's, or its
// repayment's item or its settlement's ID when it has no debit.
func (j *job) lane(ks keyspace) string {
	switch {
	case len(j.debits) > 0:
		return ks.bucketIn(j.debits[0].Key, j.tag(0))
	case j.kind == kindRepay:
		return ks.bucketIn(j.item, j.itemTag)
	}
	return j.once
}

// errDuplicate is decide's answer for a settlement or a repayment applied
// before.
var errDuplicate = errors.New("redisstore: applied before")

// restated sets j's restatements from a reply that found levels stored
// under other limits.
func (j *job) restated(r *reply) error {
	if len(r.fields) != 2*len(j.debits) {
		return fmt.Errorf("%w: restate of %d fields for %d debits", errReply, len(r.fields), len(j.debits))
	}
	j.restate = make([]string, len(j.debits))
	for i := range j.debits {
		stored, was := r.fields[2*i], r.fields[2*i+1]
		d := &j.debits[i]
		if stored == "" || was == shape(d.Bucket) {
			continue
		}
		x, err := tokenbucket.ParseInt128(stored)
		if err != nil {
			return fmt.Errorf("%w: stored level %q: %w", errReply, stored, err)
		}
		from, err := parseShape(was)
		if err != nil {
			return err
		}
		to := d.Bucket.Restate(tokenbucket.State{X: x}, from, r.nowMs)
		j.restate[i] = stored + "," + to.X.String()
	}
	return nil
}

// decision is the decision the script made, told in full: cascade.Decide
// run again here on the levels the script saw, at its clock, gives every
// status; the admission must be the script's.
func (s *Store) decision(j *job) (cascade.Decision, error) {
	r := &j.reply
	if len(r.fields) != len(j.debits) {
		return cascade.Decision{}, fmt.Errorf("%w: %d levels for %d debits", errReply, len(r.fields), len(j.debits))
	}
	slot := make([]int, len(j.debits))
	levels := make([]tokenbucket.Level, 0, len(j.debits))
	for i := range j.debits {
		d := &j.debits[i]
		switch f := r.fields[i]; f {
		case "=":
			slot[i] = -1
			for k := 0; k < i; k++ {
				if j.debits[k].Key == d.Key && j.debits[k].Limit == d.Limit {
					slot[i] = slot[k]
					break
				}
			}
			if slot[i] < 0 {
				return cascade.Decision{}, fmt.Errorf("%w: debit %d shares no earlier level", errReply, i)
			}
			continue
		case "":
			levels = append(levels, tokenbucket.New(d.Bucket.Full(r.nowMs)))
		default:
			x, err := tokenbucket.ParseInt128(f)
			if err != nil {
				return cascade.Decision{}, fmt.Errorf("%w: level %q: %w", errReply, f, err)
			}
			levels = append(levels, tokenbucket.Stored(tokenbucket.State{X: x}))
		}
		slot[i] = len(levels) - 1
	}
	p := cascade.Plan{Debits: j.debits}
	dec := cascade.Decide(&p, slot, levels, r.nowMs)
	if want := r.status[1] == '1'; dec.Admitted != want {
		return cascade.Decision{}, fmt.Errorf("%w: Redis admitted %v, the same levels admit %v", errReply, want, dec.Admitted)
	}
	s.seen.record(j.debits, slot, levels, &dec, r.nowMs)
	return dec, nil
}

// estimate is this process's best estimate of Redis's clock (unix ms):
// Config.Now's when set.
func (s *Store) estimate() int64 {
	if s.cfg.Now != nil {
		return s.cfg.Now().UnixMilli()
	}
	return time.Now().UnixMilli() + s.skewMs.Load()
}

// observeClock records Redis's clock as a reply told it.
func (s *Store) observeClock(redisMs int64) {
	if s.cfg.Now == nil {
		s.skewMs.Store(redisMs - time.Now().UnixMilli())
	}
}

// ErrUnavailable marks a call Redis did not answer in time, or an error
// of the connection: the plan was not decided (the service applies
// ON_UNAVAILABLE).
var ErrUnavailable = errors.New("redisstore: Redis unavailable")

// classify wraps a call's error: one that may have run in Redis (a
// timeout after the write) wraps cascade.ErrMayHaveLanded as well.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("redisstore: no answer in time: %w: %w: %w", ErrUnavailable, cascade.ErrMayHaveLanded, err)
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return fmt.Errorf("redisstore: Redis refused the call: %w: %w", ErrUnavailable, re)
	}
	return fmt.Errorf("redisstore: %w: %w: %w", ErrUnavailable, cascade.ErrMayHaveLanded, err)
}
