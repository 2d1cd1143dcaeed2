package accesslog_test

import (
	"context"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"

	"github.com/dynalimit/dynalimit/internal/accesslog"
	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// benchEntries signs n leases of a three-level chain with one adjusted
// limit (the shape of examples/envoy/config/llm.yaml) and returns their
// access-log entries, each reporting 700 tokens against an estimate of 500.
func benchEntries(b *testing.B, k *lease.Keyring, n int, now time.Time) []*datav3.HTTPAccessLogEntry {
	b.Helper()
	tpm, _ := tokenbucket.Rate(1_000_000_000, time.Second, 0)
	out := make([]*datav3.HTTPAccessLogEntry, n)
	for i := range out {
		l := &lease.Lease{ID: lease.NewID(), Domain: "llm", Expires: now.Add(time.Hour)}
		for _, e := range []string{"key-7f3a9c", "proj-payments", "tenant-acme"} {
			l.Buckets = append(l.Buckets, lease.Bucket{
				Key:    cascade.Key{Namespace: "default", Entity: e, Resource: "llm"},
				Limits: []lease.Limit{{Name: "tpm", Bucket: tpm, Estimate: 500 * tokenbucket.PerToken}},
			})
		}
		tok, err := k.Sign(l)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = entry(tok, map[string]string{"x-llm-tokens": "700"}, nil, nil)
	}
	return out
}

// BenchmarkSinkSettle is one access-log entry settled on the embedded
// store: the lease found and verified, the cost read from a header, and
// 200 tokens charged on each of three levels once. Run with -cpu 1 for the
// adjustments one core settles a second (1e9 / ns/op).
func BenchmarkSinkSettle(b *testing.B) {
	k, _ := lease.NewKeyring([]byte("a benchmark key of thirty-two bytes"))
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "llm.yaml", Data: []byte(config)}}, descriptors.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 1 << 15
	entries := benchEntries(b, k, batch, time.Now())
	newSink := func() (*accesslog.Sink, *memstore.Store) {
		st := memstore.New()
		a := adjust.New(adjust.Options{Settler: st, Keys: func() *lease.Keyring { return k }, Metrics: metrics.New(nil)})
		b.Cleanup(a.Close)
		return accesslog.New(a, func() *descriptors.Config { return cfg }, metrics.New(nil), nil), st
	}
	sink, _ := newSink()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%batch == 0 {
			// Every lease settles once: a fresh store for the next round.
			b.StopTimer()
			sink, _ = newSink()
			b.StartTimer()
		}
		if res := sink.Settle(ctx, entries[i%batch]); res != metrics.AdjustApplied {
			b.Fatalf("entry %d: %q", i, res)
		}
	}
}
