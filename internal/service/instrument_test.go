package service

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func TestInstrument(t *testing.T) {
	if st := newFakeStore(); Instrument(st, nil) != Store(st) {
		t.Errorf("Instrument(st, nil) wraps, want st unchanged")
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	st := newFakeStore()
	wrapped := Instrument(st, m)
	bucket, err := tokenbucket.Rate(1, 60_000_000_000, 0)
	if err != nil {
		t.Fatalf("tokenbucket.Rate() error = %v", err)
	}
	plan := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "default", Entity: "e", Resource: "r"}, Limit: "l", Bucket: bucket, Amount: tokenbucket.PerToken}}}
	steps := []struct {
		err          error
		wantAdmitted bool
		wantErr      bool
	}{
		{nil, true, false},
		{nil, false, false},
		{errDown, false, true},
	}
	for i, s := range steps {
		st.setErr(s.err)
		dec, err := wrapped.Acquire(context.Background(), plan)
		if (err != nil) != s.wantErr || dec.Admitted != s.wantAdmitted {
			t.Errorf("step %d: Acquire() = %v, %v, want admitted %v, error %v", i, dec.Admitted, err, s.wantAdmitted, s.wantErr)
		}
	}
	if got := counterValue(t, reg, "ratelimit_store_errors_total", nil); got != 1 {
		t.Errorf("ratelimit_store_errors_total = %v, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_store_duration_seconds" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			counts[mm.GetLabel()[0].GetValue()] = mm.GetHistogram().GetSampleCount()
		}
	}
	for _, o := range []string{"admitted", "refused", "error"} {
		if counts[o] != 1 {
			t.Errorf("store latency samples{outcome=%q} = %d, want 1", o, counts[o])
		}
	}
}
