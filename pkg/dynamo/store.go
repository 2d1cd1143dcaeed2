package dynamo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Defaults applied by NewStore to zero Config fields.
const (
	DefaultTimeout            = 15 * time.Millisecond
	DefaultConfigCacheTTL     = 10 * time.Second
	DefaultRejectionCacheSize = 10000

	// MaxShards bounds shard doubling (a doubling is one transaction over
	// every old and new shard, at most 100 items).
	MaxShards = 32

	maxAttempts  = 64
	maxRaces     = 24
	maxImages    = 100000
	bucketTTL    = 7 * 24 * time.Hour
	startTimeout = 5 * time.Second
)

// Config configures a Store.
type Config struct {
	// Table is the DynamoDB table name.
	Table string
	// Namespace is the namespace of admin calls and of plan keys whose
	// Namespace is empty ("default" when empty).
	Namespace string
	// Timeout is the deadline of every DynamoDB call (BACKEND_TIMEOUT).
	Timeout time.Duration
	// ConfigCacheTTL is how long a replica trusts stored limits and entity
	// records before reading them again.
	ConfigCacheTTL time.Duration
	// RejectionCacheSize bounds the local rejection cache (entries); zero
	// means DefaultRejectionCacheSize, a negative size disables the cache.
	RejectionCacheSize int
}

// Observer receives the store's own events (the DynamoDB calls themselves are
// observed by wrapping the API). Implementations must be safe for concurrent
// use and must not block.
type Observer interface {
	// ShardDoubled is called after the store doubled a bucket's shard count.
	ShardDoubled()
	// RejectionCacheHit is called when a decision was answered from the local
	// rejection cache without a DynamoDB call.
	RejectionCacheHit()
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithLogger sets the store's logger.
func WithLogger(l *logrus.Entry) Option { return func(s *Store) { s.log = l } }

// WithObserver sets the observer of shard doublings and rejection-cache hits.
func WithObserver(o Observer) Option { return func(s *Store) { s.obs = o } }

type nopObserver struct{}

func (nopObserver) ShardDoubled()      {}
func (nopObserver) RejectionCacheHit() {}

// Store is the DynamoDB store. It is safe for concurrent use.
type Store struct {
	api API
	cfg Config
	now func() time.Time
	log *logrus.Entry
	obs Observer

	closed atomic.Bool

	mu      sync.Mutex
	images  map[string]*image   // bucket PK → last image this replica saw
	shards  map[string]int      // bucket base key → shard count
	rejects map[string]rejected // bucket PK → refusal until
	configs map[string]cachedConfig
	ents    map[string]cachedEntity

	// stripes serialise, per replica, the decisions on one bucket item
	// (striped by key hash): one write in flight per item and replica, the
	// next decision guessing from its ALL_NEW. A decision waits at most
	// Timeout/3 for its stripes, then goes ahead unserialised.
	stripes [256]chan struct{}
}

type rejected struct {
	untilMs int64
	shard   int
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
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ConfigCacheTTL <= 0 {
		cfg.ConfigCacheTTL = DefaultConfigCacheTTL
	}
	if cfg.RejectionCacheSize == 0 {
		cfg.RejectionCacheSize = DefaultRejectionCacheSize
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	s := &Store{
		api: api, cfg: cfg, now: time.Now, obs: nopObserver{},
		images: map[string]*image{}, shards: map[string]int{}, rejects: map[string]rejected{},
		configs: map[string]cachedConfig{}, ents: map[string]cachedEntity{},
	}
	for i := range s.stripes {
		s.stripes[i] = make(chan struct{}, 1)
	}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		s.log = logrus.NewEntry(l)
	}
	s.log = s.log.WithField("component", "dynamo")
	if err := s.checkVersion(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the store. It owns no goroutines; calls after Close fail.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

var errClosed = errors.New("dynamo: store is closed")

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

func baseKey(ns string, k cascade.Key) string {
	return nsPart(ns) + "/" + esc(k.Entity) + "#" + esc(k.Resource)
}

// item is one bucket item of a plan during a decision.
type item struct {
	key   cascade.Key
	ns    string
	base  string
	n     int // shard count assumed
	shard int
	pk    string
	img   *image
	fresh bool // img was read (or returned) during this decision
	tried int
}

func (it *item) choose(s *Store, shard int) {
	it.shard = shard
	it.pk = bucketPK(it.ns, it.key.Entity, it.key.Resource, shard)
	it.img, it.fresh = s.cachedImage(it.pk), false
}

// slot is one distinct limit of one item.
type slot struct {
	item   int
	prefix string
}

// Acquire decides plan all-or-nothing (see cascade.Decide) against the
// table. Being over limit is a decision; an error means DynamoDB could not
// be asked in time (wrapping ErrUnavailable, ErrThrottled or ErrConflict).
func (s *Store) Acquire(ctx context.Context, plan *cascade.Plan) (cascade.Decision, error) {
	if s.closed.Load() {
		return cascade.Decision{}, errClosed
	}
	if err := ctx.Err(); err != nil {
		return cascade.Decision{}, fmt.Errorf("dynamo: acquire: %w", err)
	}
	if plan == nil || len(plan.Debits) == 0 {
		return cascade.Decision{Admitted: true, Statuses: []cascade.Status{}}, nil
	}
	// One budget for the whole decision: every call below also has its own
	// deadline of at most Timeout.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	p := &cascade.Plan{Debits: append([]cascade.Debit(nil), plan.Debits...)}

	// Items, slots, and what is missing from the caches.
	var items []*item
	byKey := map[cascade.Key]int{}
	for i := range p.Debits {
		k := p.Debits[i].Key
		if _, ok := byKey[k]; ok {
			continue
		}
		ns := s.ns(k)
		it := &item{key: k, ns: ns, base: baseKey(ns, k)}
		it.n = s.shardCount(it.base)
		it.choose(s, s.pickShard(it.n))
		byKey[k] = len(items)
		items = append(items, it)
	}
	if err := s.loadConfigs(ctx, p, items); err != nil {
		return cascade.Decision{}, err
	}
	if dec, ok := s.fromRejectionCache(p, items, byKey); ok {
		s.obs.RejectionCacheHit()
		return applied(p, dec), nil
	}
	release, err := s.lockItems(ctx, items)
	if err != nil {
		return cascade.Decision{}, err
	}
	defer release()
	for _, it := range items {
		if it.img == nil || !it.fresh {
			it.img = s.cachedImage(it.pk) // the write before ours may have left a newer one
		}
	}
	if dec, ok := s.fromRejectionCache(p, items, byKey); ok {
		s.obs.RejectionCacheHit()
		return applied(p, dec), nil
	}
	dec, err := s.decide(ctx, p, items, byKey)
	if err != nil {
		return dec, err
	}
	return applied(p, dec), nil
}

// applied reports in each status the limit that decided it: the plan's, or
// the stored override resolved into p, for the whole bucket (not one shard's
// share of it).
func applied(p *cascade.Plan, dec cascade.Decision) cascade.Decision {
	for i := range dec.Statuses {
		dec.Statuses[i].Bucket = p.Debits[i].Bucket
	}
	return dec
}

// lockItems takes the stripes of the plan's items in index order (no
// deadlock), waiting at most Timeout/3 in all; stripes not free by then are
// skipped. The returned func releases what was taken.
func (s *Store) lockItems(ctx context.Context, items []*item) (func(), error) {
	var idx []int
	for _, it := range items {
		idx = append(idx, int(fnv32(it.base)%uint32(len(s.stripes))))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	var held []int
	release := func() {
		for _, i := range held {
			<-s.stripes[i]
		}
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for _, i := range idx {
		select {
		case s.stripes[i] <- struct{}{}:
			held = append(held, i)
			continue
		default:
		}
		if timer == nil {
			timer = time.NewTimer(s.cfg.Timeout / 3)
		}
		select {
		case s.stripes[i] <- struct{}{}:
			held = append(held, i)
		case <-timer.C:
			return release, nil
		case <-ctx.Done():
			release()
			return func() {}, fmt.Errorf("dynamo: acquire: %w: %w", ErrUnavailable, ctx.Err())
		}
	}
	return release, nil
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// pickShard returns a random shard below n.
func (s *Store) pickShard(n int) int {
	if n <= 1 {
		return 0
	}
	return rand.IntN(n)
}

// shaped returns p with every bucket divided among its item's shards.
func shaped(p *cascade.Plan, items []*item, byKey map[cascade.Key]int) *cascade.Plan {
	q := &cascade.Plan{Debits: append([]cascade.Debit(nil), p.Debits...)}
	for i := range q.Debits {
		q.Debits[i].Bucket = perShard(q.Debits[i].Bucket, items[byKey[q.Debits[i].Key]].n)
	}
	return q
}

// perShard is a limit's share on one of n shards: cp/n and ra/n.
func perShard(l tokenbucket.Limit, n int) tokenbucket.Limit {
	if n <= 1 {
		return l
	}
	l.Capacity = max(l.Capacity/tokenbucket.Millitokens(n), 1)
	l.RefillAmount = max(l.RefillAmount/tokenbucket.Millitokens(n), 1)
	return l
}

func slotsOf(p *cascade.Plan, byKey map[cascade.Key]int) ([]int, []slot) {
	idx := make([]int, len(p.Debits))
	var slots []slot
	seen := map[slot]int{}
	for i := range p.Debits {
		sl := slot{item: byKey[p.Debits[i].Key], prefix: limitPrefix(p.Debits[i].Limit)}
		j, ok := seen[sl]
		if !ok {
			j = len(slots)
			seen[sl] = j
			slots = append(slots, sl)
		}
		idx[i] = j
	}
	return idx, slots
}

// states returns the concrete state of every slot in the items' images
// (absent limits start full at nowMs).
func states(q *cascade.Plan, idx []int, slots []slot, items []*item, nowMs int64) []tokenbucket.State {
	st := make([]tokenbucket.State, len(slots))
	done := make([]bool, len(slots))
	for i := range q.Debits {
		j := idx[i]
		if done[j] {
			continue
		}
		done[j] = true
		im := items[slots[j].item].img
		if l, ok := im.has(slots[j].prefix); ok {
			st[j] = l.state()
		} else {
			st[j] = startState(im, q.Debits[i].Bucket, nowMs)
		}
	}
	return st
}

func hasCost(p *cascade.Plan) bool {
	for i := range p.Debits {
		if op := p.Debits[i].Op; op == cascade.Charge || op == cascade.Refund {
			return true
		}
	}
	return false
}

// decide runs the decision loop: guess from the images this replica holds,
// write conditionally, and on a lost race take the item's old image and
// decide again.
func (s *Store) decide(ctx context.Context, p *cascade.Plan, items []*item, byKey map[cascade.Key]int) (cascade.Decision, error) {
	cost := hasCost(p)
	txn, doubled := false, false
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt >= 3 {
			// Lost several races: step aside for a random moment.
			t := time.NewTimer(time.Duration(rand.IntN(attempt*500)) * time.Microsecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return cascade.Decision{}, fmt.Errorf("dynamo: acquire: %w: %w", ErrUnavailable, ctx.Err())
			case <-t.C:
			}
		}
		// Items this replica has never seen are read first, all in one call.
		if err := s.readCold(ctx, items); err != nil {
			return cascade.Decision{}, err
		}
		now := s.nowMs()
		q := shaped(p, items, byKey)
		idx, slots := slotsOf(q, byKey)
		guess := cascade.Decide(q, idx, states(q, idx, slots, items, now), now)

		if guess.Admitted && attempt >= maxRaces && !cost {
			// Lost maxRaces races for tokens the winners took: refuse
			// rather than wait (never admits more than exact).
			return contended(scaleStatuses(guess, q, items, byKey), q), nil
		}
		if !guess.Admitted {
			stale := false
			for _, it := range items {
				if !it.fresh {
					it.img, it.fresh = nil, false
					s.forgetImage(it.pk)
					stale = true
				}
			}
			if stale {
				continue // confirm a refusal on fresh images only
			}
			if s.retryOtherShard(q, guess, items, byKey) {
				continue
			}
			if !cost {
				s.rememberRefusal(q, guess, items, byKey, now)
				return scaleStatuses(guess, q, items, byKey), nil
			}
			txn = txn || len(items) > 1
		}

		ws, double, ok := buildWrites(q, idx, slots, items, guess, now, attempt >= 2, !doubled)
		if !ok {
			ws, double, _ = buildWrites(q, idx, slots, items, guess, now, false, !doubled)
		}
		if double != nil {
			if err := s.double(ctx, double); err != nil {
				return cascade.Decision{}, err
			}
			doubled = true // once per decision: wcu is a soft limit
			continue
		}
		if len(ws) == 0 {
			return scaleStatuses(guess, q, items, byKey), nil
		}
		if len(ws) == 1 && !txn {
			dec, ok, err := s.writeOne(ctx, q, idx, slots, items, ws[0], now)
			if err != nil {
				return cascade.Decision{}, err
			}
			if ok {
				return scaleStatuses(dec, q, items, byKey), nil
			}
			continue
		}
		if !txn {
			dec, ok, err := s.writeParallel(ctx, q, idx, slots, items, ws, now)
			if err != nil {
				return cascade.Decision{}, err
			}
			if ok {
				return scaleStatuses(dec, q, items, byKey), nil
			}
			txn = true
			continue
		}
		ok, err := s.writeTxn(ctx, items, ws, now)
		if err != nil {
			return cascade.Decision{}, err
		}
		if ok {
			return scaleStatuses(guess, q, items, byKey), nil
		}
	}
	return cascade.Decision{}, fmt.Errorf("dynamo: acquire: %d attempts lost the race: %w", maxAttempts, ErrConflict)
}

// contended turns an admitted guess into a refusal after too many lost races:
// every consuming enforced debit refused, retry after a millisecond.
func contended(dec cascade.Decision, q *cascade.Plan) cascade.Decision {
	dec.Admitted = false
	for i := range dec.Statuses {
		if d := q.Debits[i]; d.Role != cascade.Advisory && d.Op != cascade.Refund {
			dec.Statuses[i].OK = false
			dec.Statuses[i].RetryAfter = time.Millisecond
		}
	}
	return dec
}

// scaleStatuses reports remaining tokens of a sharded bucket as the whole
// bucket's (the chosen shard's share times the shard count).
func scaleStatuses(dec cascade.Decision, q *cascade.Plan, items []*item, byKey map[cascade.Key]int) cascade.Decision {
	for i := range dec.Statuses {
		if n := items[byKey[q.Debits[i].Key]].n; n > 1 {
			dec.Statuses[i].Remaining *= tokenbucket.Millitokens(n)
		}
	}
	return dec
}

// retryOtherShard moves refused sharded items to a shard not tried yet (at
// most two others) and reports whether it did.
func (s *Store) retryOtherShard(q *cascade.Plan, dec cascade.Decision, items []*item, byKey map[cascade.Key]int) bool {
	moved := false
	for i := range q.Debits {
		if dec.Statuses[i].OK || q.Debits[i].Role != cascade.Enforce {
			continue
		}
		it := items[byKey[q.Debits[i].Key]]
		if it.n <= 1 || it.tried >= 2 || it.tried+1 >= it.n {
			continue
		}
		it.tried++
		it.choose(s, (it.shard+1+rand.IntN(it.n-1))%it.n)
		moved = true
	}
	return moved
}

// write is one conditional update of one item.
type write struct {
	item   int
	exists bool
	limits []limitWrite
	refill bool // some limit's last refill moves
	revert bool // compensable
}

// buildWrites turns the guess into one conditional write per item that the
// decision changes. It returns the item to shard further instead when that
// item's hidden wcu limit is exhausted. With lazy, an admitted decision
// consumes without crediting refill when that gives the same outcome (no
// lock on lr: concurrent consumers do not conflict); it reports false when
// it cannot.
func buildWrites(q *cascade.Plan, idx []int, slots []slot, items []*item, guess cascade.Decision, now int64, lazy, mayDouble bool) ([]write, *item, bool) {
	admitted := guess.Admitted
	lazy = lazy && admitted
	syms := make([]sym, len(slots))
	shapes := make([]tokenbucket.Limit, len(slots))
	present := make([]bool, len(slots))
	imgs := make([]limitImage, len(slots))
	init := make([]bool, len(slots))
	for i := range q.Debits {
		j := idx[i]
		if init[j] {
			continue
		}
		init[j] = true
		shapes[j] = q.Debits[i].Bucket
		im := items[slots[j].item].img
		imgs[j], present[j] = im.has(slots[j].prefix)
		syms[j] = newSym(im, slots[j].prefix, shapes[j], now)
		syms[j].lazy = lazy
	}
	// Pass 1: every debit judged, as Decide does.
	refilled := make([]int64, len(slots))
	for j := range syms {
		r := syms[j]
		r.lazy = false
		r.refill(shapes[j], now)
		refilled[j] = r.val()
		if lazy {
			refilled[j] = syms[j].val()
		}
	}
	for i := range q.Debits {
		ok := syms[idx[i]].step(&q.Debits[i], now, true)
		if lazy && (ok != guess.Statuses[i].OK || syms[idx[i]].spoiled) {
			return nil, nil, false
		}
	}
	touched := make([]bool, len(items))
	if !admitted {
		// Pass 2: refill, then charges and refunds only; pass-1 bounds stay.
		for j := range syms {
			s2 := newSym(items[slots[j].item].img, slots[j].prefix, shapes[j], now)
			s2.lo, s2.hi = syms[j].lo, syms[j].hi
			syms[j] = s2
		}
		for i := range q.Debits {
			d := &q.Debits[i]
			syms[idx[i]].refill(d.Bucket, now)
			if d.Op == cascade.Charge || d.Op == cascade.Refund {
				syms[idx[i]].step(d, now, false)
				touched[slots[idx[i]].item] = true
			}
		}
	} else {
		for j := range slots {
			touched[slots[j].item] = true
		}
	}
	var ws []write
	for ii, it := range items {
		if !touched[ii] {
			continue
		}
		w := write{item: ii, exists: it.img != nil && it.img.exists, revert: admitted}
		for j := range slots {
			if slots[j].item != ii {
				continue
			}
			lw := limitWrite{prefix: slots[j].prefix, shape: shapes[j], present: present[j], img: imgs[j], s: syms[j]}
			lw.revert = refilled[j] - syms[j].val()
			if syms[j].last != imgs[j].LastRefill {
				w.refill = true
			}
			w.limits = append(w.limits, lw)
		}
		// The hidden write-capacity limit: one token per write, taken
		// without crediting refill when it can (no lock on its lr).
		wimg, wok := it.img.has("wcu")
		wd := cascade.Debit{Bucket: wcuShape, Amount: wcuCost, Op: cascade.Charge}
		wc := newSym(it.img, "wcu", wcuShape, now)
		wc.lazy = wok
		if ok := wc.step(&wd, now, true); !ok || wc.spoiled {
			wc = newSym(it.img, "wcu", wcuShape, now)
			if !wc.step(&wd, now, true) && admitted && mayDouble && it.n < MaxShards {
				return nil, it, true
			}
		}
		if wc.last != wimg.LastRefill {
			w.refill = true
		}
		w.limits = append(w.limits, limitWrite{prefix: "wcu", shape: wcuShape, present: wok, img: wimg, s: wc})
		ws = append(ws, w)
	}
	return ws, nil, true
}
