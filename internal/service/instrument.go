package service

import (
	"context"
	"time"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Instrument wraps st so that every Acquire records its latency and outcome
// (admitted, refused, error) in m; errors also count as store errors. A nil m
// returns st unchanged.
func Instrument(st Store, m *metrics.Metrics) Store {
	if m == nil {
		return st
	}
	return &instrumented{store: st, metrics: m}
}

type instrumented struct {
	store   Store
	metrics *metrics.Metrics
}

// Acquire decides p with the wrapped store and records the call.
func (i *instrumented) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	start := time.Now()
	dec, err := i.store.Acquire(ctx, p)
	outcome := metrics.StoreAdmitted
	switch {
	case err != nil:
		outcome = metrics.StoreError
	case !dec.Admitted:
		outcome = metrics.StoreRefused
	}
	i.metrics.ObserveStore(outcome, time.Since(start))
	return dec, err
}
