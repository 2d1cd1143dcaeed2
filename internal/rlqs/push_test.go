package rlqs

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/service"
)

// TestPushBetweenReports: two Envoys' streams on one replica share a
// bucket of 100/s; when the second reports three times the first's
// demand, the call its report makes changes the first's share, and the
// first is sent its new assignment at once, before its next report, on
// both transports.
func TestPushBetweenReports(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			clock := newClock()
			r := newRig(t, testYAML, Options{})
			r.store = memstore.New(memstore.WithClock(clock.now)) // one clock for the service and its store
			r.svc = service.New(r.store, r.srv.o.Config)
			r.srv.o.Charger, r.srv.now = r.svc, clock.now
			c := r.dial(t, tr)
			a, b := openStream(t, c), openStream(t, c)
			exchange := func(st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, m *reports) float64 {
				t.Helper()
				if err := st.Send(m); err != nil {
					t.Fatal(err)
				}
				return rateOf(t, st)
			}
			bucket := tenant("a", "/x")
			exchange(a, report("edge", bucket, 1, 0, 0))
			clock.add(2 * time.Second)
			exchange(b, report("edge", bucket, 1, 0, 0))
			clock.add(3 * time.Second)
			if got := exchange(a, report("edge", bucket, 25, 475, 5*time.Second)); got != 100 {
				t.Fatalf("the first alone with a known demand: %v/s, want 100", got)
			}
			clock.add(2 * time.Second)
			if got := exchange(b, report("edge", bucket, 25, 1475, 5*time.Second)); got != 75 {
				t.Errorf("the second, at 300 of 400 requests/s: %v/s, want 75", got)
			}
			if got := rateOf(t, a); got != 25 {
				t.Errorf("the first, pushed: %v/s, want 25", got)
			}
		})
	}
}

// rateOf receives one message on st and returns its first token bucket's
// rate, in tokens a second.
func rateOf(t *testing.T, st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient) float64 {
	t.Helper()
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range resp.GetBucketAction() {
		if tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
			return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
		}
	}
	t.Fatalf("no token bucket in %v", resp)
	return 0
}
