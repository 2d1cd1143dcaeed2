package rlqs

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestMemoryPerBucket measures what a watched bucket holds (its stream's
// watch, the replica's pool entry, the store's bucket item): 100
// streams of 1,000 buckets each, ids of two short keys. docs/rlqs.md
// quotes the figure; the bound is twice it.
func TestMemoryPerBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100,000 buckets")
	}
	r := newRig(t, testYAML, Options{})
	measure(t, r.srv, "watch, pool entry and the embedded store's item", 4096)
	// The service's own part: a server of its own whose charger holds
	// nothing (the first server's pool still runs, so it is not changed).
	bare := New(Options{Config: func() *descriptors.Config { return r.cfg }, Charger: fixedCharger{}, Observer: &countObserver{}})
	measure(t, bare, "watch and pool entry", 1536)
}

// fixedCharger answers every report with one 100/s limit, holding nothing.
type fixedCharger struct{}

func (fixedCharger) ChargeQuota(context.Context, string, []descriptors.Entry, service.QuotaCharge) (service.Quota, error) {
	return service.Quota{Matched: true, Limits: []service.QuotaLimit{{Bucket: tokenbucket.Limit{Capacity: 100_000, RefillAmount: 100_000, RefillPeriod: time.Second}}}}, nil
}

// measure holds 100 streams of 1,000 buckets on srv and reports the heap
// they take per bucket, failing above bound bytes.
func measure(t *testing.T, srv *Server, what string, bound float64) {
	const streams, buckets = 100, 1000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	held := make([]*streamState, 0, streams)
	for s := range streams {
		st := srv.newStream()
		msg := &reports{Domain: "edge"}
		for b := range buckets {
			msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &usage{
				BucketId:    &rlqspb.BucketId{Bucket: tenant("tenant-"+strconv.Itoa(s), "/path/"+strconv.Itoa(b))},
				TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1,
			})
		}
		if _, err := st.handle(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		held = append(held, st)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / (streams * buckets)
	t.Logf("%d streams × %d buckets: %.0f bytes a bucket (%s); 1,000 × 1,000 would hold %.0f MiB",
		streams, buckets, per, what, per*1e6/(1<<20))
	if per > bound {
		t.Errorf("%.0f bytes a bucket (%s), want under %.0f", per, what, bound)
	}
	for _, st := range held {
		st.close(context.Background())
	}
	runtime.KeepAlive(held)
}
