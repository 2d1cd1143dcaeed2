//go:build rlqsfleet

package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

func init() { scenarios++ }

// TestRLQSFleet: three Envoys on examples/envoy/envoy-rlqs.yaml, two
// service replicas on one DynamoDB Local table (the first Envoy on one,
// the others on the other), one tenant of 100/s, demand 3:1:0 then
// 1:1:1. After the first two report intervals of each phase, every 10 s
// window admits the limit within 5%, and each Envoy's part of what the
// phase admits from then on is within 10% of its part of the demand. (Per
// 10 s window the parts swing when the Envoys report at nearly the same
// moment: one interval of a stream holds two of another's reports, or
// none, and the share it reads swings by that one's demand; a window saw
// 0.287 and the next 0.414 of the admitted where 0.333 is right. See
// docs/rlqs.md.) It is not part of make test: runs differ (a 1:1:1 phase
// has admitted 78 and 88% of the limit after a 3:1:0 one), and it runs
// with the build tag rlqsfleet: make test-rlqs-fleet.
func TestRLQSFleet(t *testing.T) {
	envoytest.Scenario(t, "15 RLQS fleet: three Envoys, two replicas on DynamoDB Local, demand 3:1:0 then 1:1:1")
	env := append(envoytest.DynamoDBTable(t, dynamotest.Shared(t)), "BACKEND_TIMEOUT=400ms")
	if os.Getenv("RLQS_FLEET_REDIS") != "" {
		env = []string{"BACKEND_TYPE=redis", "REDIS_URL=" + redistest.Start(t, redistest.Options{}).Addr(), "BACKEND_TIMEOUT=100ms"}
	}
	dir := filepath.Join(testutil.RepoRoot(t), configDir)
	replicas := []*envoytest.Service{envoytest.StartService(t, dir, env...), envoytest.StartService(t, dir, env...)}
	var envoys []*envoytest.Rig
	for _, s := range []*envoytest.Service{replicas[0], replicas[1], replicas[1]} {
		envoys = append(envoys, envoytest.Start(t, envoytest.Options{Bootstrap: rlqsBootstrap, ServiceAddr: "127.0.0.1:" + strconv.Itoa(s.GRPCPort)}))
	}
	const phase, settle, window = 30 * time.Second, 10 * time.Second, 10 * time.Second
	for _, p := range []struct {
		name   string
		demand [3]float64
	}{{"3:1:0", [3]float64{300, 100, 0}}, {"1:1:1", [3]float64{100, 100, 100}}} {
		bins := drive(t, envoys, p.demand, phase)
		for i, s := range replicas {
			m := s.Metrics(t)
			t.Logf("replica %d: charge failures %v, over-admitted %v, store errors %v, token buckets pushed %v", i,
				m["ratelimit_rlqs_charge_failures_total"], m["ratelimit_rlqs_over_admitted_total"], m["ratelimit_store_errors_total"], m[`ratelimit_rlqs_assignments_total{kind="token_bucket"}`])
		}
		var phaseGot [3]float64
		for w := settle; w+window <= phase; w += window {
			var got [3]float64
			for i := range got {
				for s := w / time.Second; s < (w+window)/time.Second; s++ {
					got[i] += float64(bins[i][s])
				}
			}
			total := got[0] + got[1] + got[2]
			for i := range got {
				phaseGot[i] += got[i]
			}
			t.Logf("%s, %v–%v: admitted %.0f %.0f %.0f, %.1f/s", p.name, w, w+window, got[0], got[1], got[2], total/window.Seconds())
			if want := 100 * window.Seconds(); total < want*0.95 || total > want*1.05 {
				t.Errorf("%s, %v–%v: %.0f admitted, want %.0f ±5%%", p.name, w, w+window, total, want)
			}
		}
		demand := p.demand[0] + p.demand[1] + p.demand[2]
		total := phaseGot[0] + phaseGot[1] + phaseGot[2]
		for i := range phaseGot {
			want := p.demand[i] / demand
			if share := phaseGot[i] / total; share < want-0.1*max(want, 0.1) || share > want+0.1*max(want, 0.1) {
				t.Errorf("%s, %v–%v: Envoy %d had %.3f of the admitted, want %.3f ±10%%", p.name, settle, phase, i, share, want)
			}
		}
	}
}

// drive sends each Envoy its demand (requests a second) for d and returns
// each one's admitted requests per second.
func drive(t *testing.T, envoys []*envoytest.Rig, demand [3]float64, d time.Duration) [3][]int64 {
	t.Helper()
	var bins [3][]int64
	counts := make([][]atomic.Int64, len(envoys))
	for i := range counts {
		counts[i] = make([]atomic.Int64, int(d/time.Second)+1)
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(d))
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range envoys {
		if demand[i] == 0 {
			continue
		}
		c := envoytest.Client(t, "127.0.0."+strconv.Itoa(2+i))
		jobs := make(chan struct{}, 64)
		wg.Go(func() { // the pace
			defer close(jobs)
			tick := time.NewTicker(time.Duration(float64(time.Second) / demand[i]))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					select {
					case jobs <- struct{}{}:
					default: // the workers are behind: the demand is lost
					}
				}
			}
		})
		for range 8 {
			wg.Go(func() {
				for range jobs {
					resp, err := r.DoErr(c, http.MethodGet, "/", "x-tenant", "fleet")
					if err == nil && resp.Status == http.StatusOK {
						if s := int(time.Since(start) / time.Second); s < len(counts[i]) {
							counts[i][s].Add(1)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	for i := range counts {
		bins[i] = make([]int64, len(counts[i]))
		for s := range counts[i] {
			bins[i][s] = counts[i][s].Load()
		}
	}
	return bins
}
