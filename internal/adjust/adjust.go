package adjust

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Settler applies settlements at most once per ID: the embedded store and
// the DynamoDB store.
type Settler interface {
	Settle(ctx context.Context, s *cascade.Settlement) (cascade.Settled, error)
}

// Defaults.
const (
	// DefaultTTL is how long a lease settles after its admission
	// (LEASE_TTL).
	DefaultTTL = 15 * time.Minute
	// DefaultBudget bounds one settlement call to the store.
	DefaultBudget = time.Second
	// MaxPending bounds the settlements kept for a retry.
	MaxPending = 4096
)

// Options configure an Adjuster.
type Options struct {
	// Settler applies settlements (required).
	Settler Settler
	// Keys returns the keyring that signs and verifies leases (required);
	// it is called per lease, so a keyring reloaded from its file applies
	// at once.
	Keys func() *lease.Keyring
	// TTL is a lease's life (DefaultTTL when zero).
	TTL time.Duration
	// Budget bounds one store call (DefaultBudget when zero).
	Budget  time.Duration
	Metrics *metrics.Metrics
	Log     *logrus.Entry
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Adjuster issues and settles leases. Build it with New; Close stops its
// retries.
type Adjuster struct {
	o       Options
	life    context.Context
	stop    context.CancelFunc
	retries sync.WaitGroup

	mu      sync.Mutex
	pending int
	closed  bool // Close has begun: no retry starts
}

// New returns an Adjuster.
func New(o Options) *Adjuster {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Budget <= 0 {
		o.Budget = DefaultBudget
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	o.Log = o.Log.WithField("component", "adjust")
	a := &Adjuster{o: o}
	a.life, a.stop = context.WithCancel(context.Background())
	return a
}

// Close stops the retries of settlements the store has not taken yet and
// waits for them; each one dropped is counted failed, as is one the store
// fails to take after Close. Close may be called more than once.
func (a *Adjuster) Close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.stop()
	a.retries.Wait()
}

// Term says how one debit of a plan settles: by the adjustment named
// (none when Adjustment is ""), and for a limit in dollars (Money) at the
// price its admission used.
type Term struct {
	Adjustment string
	Money      bool
	Price      descriptors.Price
}

// Issue returns the signed lease of an admitted plan: every debit that
// terms[i] says is adjusted and that its bucket took (Status.OK), with its
// amount as the estimate (a check's is zero: the whole cost settles later)
// and, for a limit in dollars, its price. ok is false when no debit is
// adjusted.
func (a *Adjuster) Issue(domain string, debits []cascade.Debit, statuses []cascade.Status, terms []Term) (token string, ok bool, err error) {
	l := lease.Lease{Domain: domain}
	for i := range debits {
		d, tm := &debits[i], &terms[i]
		if tm.Adjustment == "" || d.Op == cascade.Refund || !statuses[i].OK {
			continue
		}
		st := &statuses[i]
		b := findBucket(&l, d.Key, st.Shard)
		shape := st.Bucket
		if shape == (tokenbucket.Limit{}) {
			shape = d.Bucket
		}
		est := d.Amount
		if d.Op == cascade.Check {
			est = 0
		}
		lim := lease.Limit{Name: d.Limit, Bucket: shape, Estimate: est}
		if tm.Adjustment != d.Limit {
			lim.Adjustment = tm.Adjustment
		}
		if tm.Money {
			lim.Money, lim.Price = true, tm.Price
		}
		b.Limits = append(b.Limits, lim)
	}
	if len(l.Buckets) == 0 {
		return "", false, nil
	}
	l.ID = lease.NewID()
	l.Expires = a.o.Now().Add(a.o.TTL)
	token, err = a.o.Keys().Sign(&l)
	if err != nil {
		return "", false, fmt.Errorf("adjust: sign lease: %w", err)
	}
	return token, true, nil
}

// findBucket returns l's bucket for key and shard, appended when new.
func findBucket(l *lease.Lease, key cascade.Key, shard int) *lease.Bucket {
	for i := range l.Buckets {
		if b := &l.Buckets[i]; b.Key == key && b.Shard == shard {
			return b
		}
	}
	l.Buckets = append(l.Buckets, lease.Bucket{Key: key, Shard: shard})
	return &l.Buckets[len(l.Buckets)-1]
}

// Open verifies token. A lease that does not verify is counted by path
// and reason, and the error (wrapping one of lease's) says why.
func (a *Adjuster) Open(path, token string) (*lease.Lease, error) {
	l, err := a.o.Keys().Verify(token, a.o.Now())
	if err != nil {
		a.o.Metrics.LeaseRejected(path, lease.Reason(err))
		return nil, err
	}
	return l, nil
}

// Report is what a report says a request used, for one adjustment: a count
// of whole tokens (Counted), or the input and output tokens of a request
// priced in dollars (Split); either, both or neither.
type Report struct {
	Tokens  uint64
	Counted bool
	In, Out uint64
	Split   bool
}

// Cost returns the report for the adjustment of a lease's limit, given its
// name; the zero Report when the report carries none for it.
type Cost func(adjustment string) Report

// actual is what lim cost by r, in millitokens: the tokens counted for a
// limit not in dollars; for a limit in dollars the input and output tokens
// at the price of the lease (its admission's), in nano-dollars. ok is false
// when r has no cost of that kind (the estimate then stands).
func actual(lim *lease.Limit, r Report) (tokenbucket.Millitokens, bool) {
	switch {
	case lim.Money:
		return lim.Price.Cost(r.In, r.Out), r.Split
	case r.Counted && r.Tokens <= uint64(tokenbucket.MaxMillitokens/tokenbucket.PerToken):
		return tokenbucket.Millitokens(r.Tokens) * tokenbucket.PerToken, true
	}
	return 0, false
}

// ErrNoCost is returned when a report carries a cost for none of a lease's
// limits: nothing is settled and every estimate stands.
var ErrNoCost = errors.New("adjust: no cost reported for any limit of the lease")

// Settle applies l's actual costs: for each limit that cost reports (a
// count for a limit not in dollars, input and output tokens for one in
// dollars), actual − estimate on the lease's bucket, as one settlement with
// the lease's ID. It returns the result (metrics.AdjustApplied or
// metrics.AdjustDuplicate), or ErrNoCost. A store failure is not returned:
// the settlement is kept and retried until its lease expires (see the
// package doc); the result is then "" and Settle returns nil.
func (a *Adjuster) Settle(ctx context.Context, path string, l *lease.Lease, cost Cost) (string, error) {
	st, ok := settlement(l, cost)
	if !ok {
		return "", ErrNoCost
	}
	res, err := a.apply(ctx, path, st)
	if err != nil {
		a.keep(path, st, err)
		return "", nil
	}
	return res, nil
}

// settlement builds the settlement of l for the costs reported; ok false
// when no limit has one.
func settlement(l *lease.Lease, cost Cost) (*settling, bool) {
	st := &settling{Settlement: cascade.Settlement{ID: l.ID, Expires: l.Expires}}
	any := false
	for _, b := range l.Buckets {
		for i := range b.Limits {
			lim := &b.Limits[i]
			name := lim.Name
			if lim.Adjustment != "" {
				name = lim.Adjustment
			}
			amount, ok := actual(lim, cost(name))
			if !ok {
				continue
			}
			any = true
			diff := amount - lim.Estimate
			d := cascade.Debit{Key: b.Key, Limit: lim.Name, Bucket: lim.Bucket, Shard: b.Shard, Op: cascade.Charge, Amount: diff}
			switch {
			case diff < 0:
				d.Op, d.Amount = cascade.Refund, -diff
			case diff == 0:
				continue
			}
			st.Debits = append(st.Debits, d)
			st.money = append(st.money, lim.Money)
		}
	}
	return st, any
}

// settling is a settlement with, for each debit, whether its limit is in
// dollars (for the metrics, which count tokens and dollars apart).
type settling struct {
	cascade.Settlement
	money []bool
}

// apply makes one store call within the budget and records its result.
func (a *Adjuster) apply(ctx context.Context, path string, st *settling) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.o.Budget)
	defer cancel()
	out, err := a.o.Settler.Settle(ctx, &st.Settlement)
	if err != nil {
		return "", err
	}
	if out.Duplicate {
		a.o.Metrics.Adjusted(path, metrics.AdjustDuplicate, 0, 0)
		return metrics.AdjustDuplicate, nil
	}
	// moved[money][refund] sums the debits by unit and direction.
	var moved [2][2]tokenbucket.Millitokens
	for i, d := range st.Debits {
		m, r := 0, 0
		if st.money[i] {
			m = 1
		}
		if d.Op != cascade.Charge {
			r = 1
		}
		moved[m][r] += d.Amount
	}
	a.o.Metrics.Adjusted(path, metrics.AdjustApplied, int64(moved[0][0]), int64(moved[0][1]))
	a.o.Metrics.AdjustedMoney(int64(moved[1][0]), int64(moved[1][1]))
	return metrics.AdjustApplied, nil
}
