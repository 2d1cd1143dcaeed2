package rlqs

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dynalimit/dynalimit/internal/grpcserver"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// testYAML has a flat rule of two limits, a two-level hierarchy, an
// unlimited rule and a deny rule.
const testYAML = `
domain: edge
descriptors:
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`

func testConfig(t testing.TB, yaml string) *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "edge.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// rig is a Server over a service on the embedded store.
type rig struct {
	srv   *Server
	svc   *service.Service
	store *memstore.Store
	cfg   *descriptors.Config
	obs   *countObserver
}

func newRig(t testing.TB, yaml string, o Options) *rig {
	t.Helper()
	r := &rig{store: memstore.New(), cfg: testConfig(t, yaml), obs: &countObserver{}}
	current := func() *descriptors.Config { return r.cfg }
	r.svc = service.New(r.store, current)
	o.Config, o.Charger, o.Observer = current, r.svc, r.obs
	r.srv = New(o)
	return r
}

// dial serves r on transport ("grpc-go" or "native") and returns a client.
func (r *rig) dial(t testing.TB, transport string) rlqspb.RateLimitQuotaServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var stop func()
	if transport == "native" {
		gs := grpcserver.New(grpcserver.Options{Codec: r.svc.Codec()})
		r.srv.Register(gs)
		go func() { defer close(done); _ = gs.Serve(lis) }()
		stop = gs.Stop
	} else {
		gs := grpc.NewServer()
		r.srv.Register(gs)
		go func() { defer close(done); _ = gs.Serve(lis) }()
		stop = gs.Stop
	}
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		stop()
		<-done
	})
	return rlqspb.NewRateLimitQuotaServiceClient(cc)
}

func openStream(t testing.TB, c rlqspb.RateLimitQuotaServiceClient) rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// report is a report of one bucket.
func report(domain string, bucket map[string]string, allowed, denied uint64, elapsed time.Duration) *reports {
	return &reports{Domain: domain, BucketQuotaUsages: []*usage{{
		BucketId:           &rlqspb.BucketId{Bucket: bucket},
		NumRequestsAllowed: allowed,
		NumRequestsDenied:  denied,
		TimeElapsed:        durationpb.New(elapsed),
	}}}
}

// countObserver counts what Observer is told.
type countObserver struct {
	mu               sync.Mutex
	streams, buckets int
	pushed           map[string]int
	errors           map[string]int
	over             float64
	failed           int
	shares           []float64
}

func (o *countObserver) with(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f()
}

func (o *countObserver) Streams(d int) { o.with(func() { o.streams += d }) }
func (o *countObserver) Buckets(d int) { o.with(func() { o.buckets += d }) }
func (o *countObserver) Pushed(k string) {
	o.with(func() {
		if o.pushed == nil {
			o.pushed = map[string]int{}
		}
		o.pushed[k]++
	})
}
func (o *countObserver) Share(f float64)        { o.with(func() { o.shares = append(o.shares, f) }) }
func (o *countObserver) OverAdmitted(r float64) { o.with(func() { o.over += r }) }
func (o *countObserver) StreamError(r string) {
	o.with(func() {
		if o.errors == nil {
			o.errors = map[string]int{}
		}
		o.errors[r]++
	})
}
func (o *countObserver) ChargeFailed() { o.with(func() { o.failed++ }) }

// errorCount is how many streams ended for reason.
func (o *countObserver) errorCount(reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.errors[reason]
}
