package rlqs

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// A replica pools its streams' reports of a bucket and charges them to
// the store once a report slot (wall-clock time in reportInterval
// slots): the pool calls the store for a bucket its delay (two to three
// fifths of a report interval, drawn at start so that replicas spread
// their calls) after the first report since its last call, so that the
// call comes after its Envoys' reports, whatever their timers, and writes
// what they changed; with no report, a report interval after its last
// call, so that a watched bucket's demand stays counted in the store's
// meters (below) while its streams hold it; the call writes when the slot
// has had no write yet,
// and reads otherwise. So the store sees one write per bucket per replica
// per slot, however many Envoys report the bucket here, and the other
// replicas' writes that followed the reports (at their own delays) are
// read by the next report, half an interval on.
//
// The same write keeps the replica's demand rate (the sum of its streams'
// last reported rates) in the bucket's demand meters
// (service.DemandLimits), as a level: charged to the meter of the current
// epoch (two slots), with what it kept in the last epoch's meter refunded
// from that one, and the next epoch's meter reset to full. The deficits of
// the current and the last meters are then every replica's last rate,
// each counted once, read by any call at any moment: the fleet's demand.
// A replica that stops writing (killed, or cut off) still counts until the
// epoch after its last write has passed, 10 to 20 s, while its Envoys keep
// their assignments; a replica whose last stream of a bucket leaves
// refunds its rate.
//
// Reports are answered at once from what the bucket's last call told,
// read anew when that is over freshWithin old (a read, not a write); a
// bucket's first report on this replica is charged at once, to learn its
// limits and the fleet's demand.

// demandScale is the millitokens a demand meter holds per request a
// second of demand rate: 10 tokens, so that a rate is kept to 1e-4
// requests a second, the meters' refill of a token a minute costs a
// level 0.002 requests a second over its two slots, and a rate of 10^8
// requests a second stays within a meter.
const demandScale = 10 * tokenbucket.PerToken

// flushTimeout bounds one pooled charge: a charge that has not landed by
// then is tried again at the next slot.
const flushTimeout = 2 * time.Second

// flushWorkers is how many buckets a replica charges at once.
const flushWorkers = 16

// pool is this replica's buckets, by domain and bucket key.
type pool struct {
	s *Server
	// offset is the pool's delay: how long after the first report since
	// a bucket's last call the pool calls the store for it (a report
	// interval after the last call, when no report comes sooner).
	offset  time.Duration
	mu      sync.Mutex
	entries map[string]*entry
	running bool
	wake    chan struct{}
}

func newPool(s *Server) *pool {
	return &pool{
		s:       s,
		offset:  reportInterval*2/5 + time.Duration(rand.Int64N(int64(reportInterval/5))),
		entries: map[string]*entry{},
		wake:    make(chan struct{}, 1),
	}
}

// entry is one bucket as this replica pools it.
type entry struct {
	domain string
	// flush serializes the entry's store calls, so that their answers
	// apply in order (a semaphore, not a mutex: a call waiting for
	// another is durably blocked in a synctest bubble, and gives up with
	// its context); mu guards the rest.
	flush *semaphore.Weighted
	mu    sync.Mutex
	// members are the watches of this replica's streams on the bucket;
	// each holds its stream's demand rate.
	members []*watch
	// entries are the bucket's descriptor entries (nil: not known yet).
	entries []descriptors.Entry
	// pending is the allowed requests reported and not charged yet.
	pending uint64
	// due is when the pool calls the store for the entry next: the
	// pool's delay after the first report since its last call, or a
	// report interval after that call, whichever is sooner.
	due   time.Time
	state quotaState
}

// quotaState is what the entry's store calls told.
type quotaState struct {
	// calls counts the answered calls, ok or not; q is the last answer
	// and known whether the store answered it; charged is what it
	// charged; err an InvalidArgument it was refused with.
	calls   int
	q       service.Quota
	known   bool
	charged float64
	err     error
	// at is when the last answered call read the levels; ref the
	// reference reading of the external rates.
	at       time.Time
	ref      levels
	external []float64
	// kept is the rate this replica keeps in the demand meter of epoch
	// keptEpoch, written in slot keptSlot (none when keptOK is false).
	kept                int64
	keptSlot, keptEpoch int64
	keptOK              bool
	// fleet is the fleet's demand rate the last answer read, mine this
	// replica's part of it, and others whether anyone else uses the
	// bucket: the rest is someone's rate, or the allowed meter fell by
	// half a request more than ours, the allowed requests this entry
	// charged (the meter refills a token a minute).
	fleet, mine float64
	ours        float64
	others      bool
}

// levels are the limits' and the allowed meter's levels read at at.
type levels struct {
	remaining []int64
	allowed   int64
	at        time.Time
	ok        bool
}

// slotOf is the report slot of t.
func slotOf(t time.Time) int64 { return t.UnixNano() / int64(reportInterval) }

// epochLength is how long a demand meter is current: a replica that
// stops writing still counts in the fleet's demand for one to two epochs
// after its last write, 10 to 20 s, while its Envoys keep the assignments
// it sent (RLQS_ASSIGNMENT_TTL, 15 s by default).
const epochLength = 2 * reportInterval

// epochOf is the demand meters' epoch of t.
func epochOf(t time.Time) int64 { return t.UnixNano() / int64(epochLength) }

// callFor is the call a report at now makes before it is answered: the
// bucket's first (a slot's charge, to learn its limits), a read when the
// last reading is older than freshWithin; or none (-1). The report's
// demand is written by the pool's call, its delay later. e.mu held.
func (e *entry) callFor(now time.Time) int {
	switch {
	case e.state.calls == 0:
		return chargeSlot
	case now.Sub(e.state.at) >= freshWithin:
		return chargeRead
	}
	return -1
}

// join adds w to its bucket's entry, starting the pool's charges when it
// was idle, and returns the entry.
func (p *pool) join(key, domain string, w *watch) *entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[key]
	if e == nil {
		e = &entry{domain: domain, flush: semaphore.NewWeighted(1)}
		p.entries[key] = e
	}
	e.mu.Lock()
	e.members = append(e.members, w)
	e.mu.Unlock()
	if !p.running {
		p.running = true
		go p.run()
	}
	return e
}

// leave removes w from its entry; the last member out charges what the
// entry still holds and drops it.
func (p *pool) leave(ctx context.Context, key string, w *watch) {
	p.mu.Lock()
	e := p.entries[key]
	last := false
	if e != nil {
		e.mu.Lock()
		e.members = slices.DeleteFunc(e.members, func(m *watch) bool { return m == w })
		last = len(e.members) == 0
		e.mu.Unlock()
		if last {
			delete(p.entries, key)
			if len(p.entries) == 0 {
				select {
				case p.wake <- struct{}{}:
				default:
				}
			}
		}
	}
	p.mu.Unlock()
	if last {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		_ = p.charge(cctx, e, chargeLast)
	}
}

// run calls the store for each entry when it is due, until the pool is
// empty.
func (p *pool) run() {
	for {
		timer := time.NewTimer(poolTick)
		select {
		case <-timer.C:
		case <-p.wake:
			timer.Stop()
		}
		now := p.s.now()
		p.mu.Lock()
		if len(p.entries) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		var list []*entry
		for _, e := range p.entries {
			e.mu.Lock()
			if !e.due.After(now) {
				e.due = now.Add(reportInterval)
				list = append(list, e)
			}
			e.mu.Unlock()
		}
		p.mu.Unlock()
		if len(list) > 0 {
			p.chargeAll(list)
		}
	}
}

// poolTick is how often the pool looks for entries due: a call comes at
// most that late.
const poolTick = 250 * time.Millisecond

// report takes a report at now into e's schedule: the pool calls the
// store for e its delay after the first report since its last call.
// e.mu held.
func (p *pool) report(e *entry, now time.Time) {
	if at := now.Add(p.offset); e.due.IsZero() || at.Before(e.due) {
		e.due = at
	}
}

// chargeAll charges the entries of list for the current slot,
// flushWorkers at a time.
func (p *pool) chargeAll(list []*entry) {
	var wg sync.WaitGroup
	next := make(chan *entry)
	for range min(flushWorkers, len(list)) {
		wg.Go(func() {
			for e := range next {
				ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
				_ = p.charge(ctx, e, chargeSlot)
				cancel()
			}
		})
	}
	for _, e := range list {
		next <- e
	}
	close(next)
	wg.Wait()
}

// Kinds of a pooled charge.
const (
	// chargeSlot is the slot's charge, which keeps the replica's demand
	// rate in the meters: the pool's call, its delay after the reports,
	// or a bucket's first report here (to learn its limits); one a slot
	// (a later one in the slot reads).
	chargeSlot = iota
	// chargeLast: the last stream left; the rate is taken back.
	chargeLast
	// chargeRead charges nothing and reads what the bucket holds: a
	// report answered from a reading older than freshWithin reads anew
	// (on DynamoDB a read, not a write).
	chargeRead
)

// freshWithin is how old a bucket's last reading may be and still answer
// a report: the reports of a replica's Envoys within it share one read.
const freshWithin = reportInterval / 5

// charge makes one store call for e: the allowed requests pending and,
// for kind, the demand meters' adjustments; a slot's charge when the slot
// has had one already reads (what the other replicas wrote since). It
// returns an InvalidArgument the store
// refused the bucket with.
func (p *pool) charge(ctx context.Context, e *entry, kind int) error {
	if err := e.flush.Acquire(ctx, 1); err != nil {
		return nil // the call was not made: the next slot's charges it
	}
	defer e.flush.Release(1)
	now := p.s.now()
	slot := slotOf(now)
	e.mu.Lock()
	if e.entries == nil {
		e.mu.Unlock()
		return nil
	}
	if kind == chargeSlot && e.state.calls > 0 && e.state.keptOK && e.state.keptSlot == slot {
		kind = chargeRead // the slot has had its write: read what others wrote since
	}
	var c service.QuotaCharge
	keep := int64(0)
	if kind != chargeRead {
		c.Allowed, e.pending = e.pending, 0
		if kind == chargeSlot {
			keep = int64(math.Round(e.localRate() * float64(demandScale)))
		}
		c.Demand = e.state.adjust(epochOf(now), keep)
	}
	entries, domain := e.entries, e.domain
	e.mu.Unlock()

	q, err := p.s.o.Charger.ChargeQuota(ctx, domain, entries, c)

	e.mu.Lock()
	defer e.mu.Unlock()
	st := &e.state
	st.calls++
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			st.err = err
			return err
		}
		// Envoy admitted them: charge them at the next slot. The meters'
		// adjustment is unknown: the next slot's starts over.
		e.pending = satAdd(e.pending, c.Allowed)
		st.keptOK = st.keptOK && kind == chargeRead
		p.s.o.Observer.ChargeFailed()
		st.known = false
		if q.Limits != nil || q.Unlimited || !st.q.Matched {
			st.q = q
		}
		return nil
	}
	st.err = nil
	if kind != chargeRead {
		st.kept, st.keptSlot, st.keptEpoch, st.keptOK = keep, slot, epochOf(now), true
	}
	p.s.o.Observer.OverAdmitted(overAdmitted(&q, c.Allowed))
	took := p.s.now().Sub(now)
	st.update(q, float64(c.Allowed), now.Add(took/2))
	if q.Metered {
		st.ours += float64(c.Allowed)
		st.read(q, epochOf(now))
	}
	p.logCharge(e, kind, c, keep, now, took)
	if kind != chargeLast {
		e.pushAll(p.s)
	}
	return nil
}

// adjust is the demand meters' adjustment that keeps rate keep (in
// demandScale units) in epoch's meter: the change from what this replica
// keeps there already, or all of it with what it kept in the last epoch's
// meter refunded from that one; and the next epoch's meter reset.
func (st *quotaState) adjust(epoch, keep int64) [3]int64 {
	var adj [3]int64
	cur, last := epoch%3, (epoch+2)%3
	switch {
	case st.keptOK && st.keptEpoch == epoch:
		adj[cur] = keep - st.kept
	case st.keptOK && st.keptEpoch == epoch-1:
		adj[cur], adj[last] = keep, -st.kept
	default:
		adj[cur] = keep
	}
	adj[(epoch+1)%3] = service.MeterReset
	return adj
}

// read takes the fleet's demand from an answer's meters in epoch: the
// deficits of the current and the last epochs' meters.
func (st *quotaState) read(q service.Quota, epoch int64) {
	deficit := func(i int64) float64 {
		return float64(tokenbucket.MaxMillitokens - q.Demand[i])
	}
	st.fleet = (deficit(epoch%3) + deficit((epoch+2)%3)) / float64(demandScale)
	st.mine = 0
	if st.keptOK && (st.keptEpoch == epoch || st.keptEpoch == epoch-1) {
		st.mine = float64(st.kept) / float64(demandScale)
	}
	fell := float64(tokenbucket.MaxMillitokens-q.Allowed) / float64(tokenbucket.PerToken)
	st.others = st.fleet-st.mine > 1e-3 || fell >= st.ours+0.5
}

// localRate is the sum of the members' known demand rates. e.mu held.
func (e *entry) localRate() float64 {
	sum := 0.0
	for _, w := range e.members {
		sum += max(w.rate, 0)
	}
	return sum
}

// update takes an answered call's quota q, which charged charged and
// whose levels the store took at about at (the middle of the call), and
// the rates at which others than quota reports consumed each limit over
// at least a report interval before it (see externalRate): a reading of
// the levels and the allowed meter is the reference of the next until an
// interval has passed, so that the call's latency, unknown within the
// call, errs by a small part of the interval.
func (st *quotaState) update(q service.Quota, charged float64, at time.Time) {
	valid := q.Metered && st.ref.ok && len(st.ref.remaining) == len(q.Limits)
	if elapsed := at.Sub(st.ref.at); valid && elapsed >= reportInterval {
		reported := service.DemandRate(tokenbucket.Millitokens(st.ref.allowed), q.Allowed, elapsed)
		st.external = make([]float64, len(q.Limits))
		for i, l := range q.Limits {
			st.external[i] = externalRate(l, st.ref.remaining[i], elapsed, reported)
		}
		valid = false // a new reference
	}
	if !valid {
		st.ref.ok, st.ref.at, st.ref.allowed = q.Metered, at, int64(q.Allowed)
		st.ref.remaining = st.ref.remaining[:0]
		for _, l := range q.Limits {
			st.ref.remaining = append(st.ref.remaining, int64(l.Remaining))
		}
	}
	st.q, st.known, st.charged, st.at = q, true, charged, at
}

// satAdd adds saturating.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
