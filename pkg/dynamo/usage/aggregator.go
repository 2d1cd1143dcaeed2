package usage

import (
	"context"
	"fmt"
)

// Writer applies usage to the snapshots, at most once per record ID.
// *Store implements it.
type Writer interface {
	ApplyUsage(ctx context.Context, recs []Entry) (Report, error)
}

var _ Writer = (*Store)(nil)

// Observer is told what each Process call did. Implementations must be
// safe for concurrent use.
type Observer interface {
	// Records counts records handed to Process, by outcome: OutcomeApplied
	// (usage added now or before, or none to add) or OutcomeFailed (to be
	// retried).
	Records(outcome string, n int)
	// Duplicates counts the applied records that had been applied before
	// (a redelivery): not added again.
	Duplicates(n int)
	// SnapshotWrites counts snapshot updates written.
	SnapshotWrites(n int)
}

// Record outcomes (Observer.Records).
const (
	OutcomeApplied = "applied"
	OutcomeFailed  = "failed"
)

// Aggregator turns stream records into snapshot writes.
type Aggregator struct {
	w   Writer
	obs Observer
}

// AggregatorOption configures an Aggregator.
type AggregatorOption func(*Aggregator)

// WithObserver sets the Observer (none by default).
func WithObserver(o Observer) AggregatorOption { return func(a *Aggregator) { a.obs = o } }

// NewAggregator returns an Aggregator writing through w.
func NewAggregator(w Writer, opts ...AggregatorOption) *Aggregator {
	a := &Aggregator{w: w, obs: nopObserver{}}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Process applies the usage of recs, each record at most once however
// often it is delivered, and returns the IDs of the records not applied,
// in the order given: the caller retries those (a Lambda reports them in
// BatchItemFailures; the poller does not move its checkpoint past the
// first). err says why they failed; it is nil when failed is empty.
func (a *Aggregator) Process(ctx context.Context, recs []Record) (failed []string, err error) {
	batch := usageRecords(recs)
	rep, err := a.w.ApplyUsage(ctx, batch)
	if err != nil && len(rep.Failed) == 0 {
		// The writer failed without naming records: none is known applied.
		rep.Applied, rep.Duplicates = 0, 0
		for _, r := range batch {
			rep.Failed = append(rep.Failed, r.ID)
		}
	}
	a.obs.Records(OutcomeApplied, rep.Applied+rep.Duplicates)
	a.obs.Records(OutcomeFailed, len(rep.Failed))
	a.obs.Duplicates(rep.Duplicates)
	a.obs.SnapshotWrites(rep.Writes)
	if len(rep.Failed) > 0 {
		if err == nil {
			err = fmt.Errorf("aggregator: %d records not applied", len(rep.Failed))
		}
		return inOrder(recs, rep.Failed), fmt.Errorf("aggregator: process: %w", err)
	}
	return nil, nil
}

// inOrder returns the IDs of ids in the order their records have in recs,
// each once.
func inOrder(recs []Record, ids []string) []string {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := make([]string, 0, len(ids))
	for _, r := range recs {
		if want[r.ID] {
			out = append(out, r.ID)
			delete(want, r.ID)
		}
	}
	return out
}

// usageRecords is the usage of each record, one Entry per record
// (without usage when it has none, so that it is counted applied).
func usageRecords(recs []Record) []Entry {
	out := make([]Entry, len(recs))
	for i, r := range recs {
		out[i] = Entry{ID: r.ID, At: r.At, Usage: r.usage()}
	}
	return out
}

type nopObserver struct{}

func (nopObserver) Records(string, int) {}
func (nopObserver) Duplicates(int)      {}
func (nopObserver) SnapshotWrites(int)  {}
