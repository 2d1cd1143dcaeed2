package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestServiceOutage: with the service stopped, Envoy answers as
// failure_mode_deny says (the example fails open; flipped, it fails
// closed), and counts it; restarted, the service decides again; a
// configuration reload in the middle of traffic loses no request.
func TestServiceOutage(t *testing.T) {
	envoytest.Scenario(t, "3 service stopped and restarted (failure_mode_deny both ways), reload under traffic")
	for _, deny := range []bool{false, true} {
		t.Run(fmt.Sprintf("failure_mode_deny=%v", deny), func(t *testing.T) {
			opts := envoytest.Options{Bootstrap: plainBootstrap, ConfigDir: configDir}
			if deny { // the example fails open: flip it
				opts.Edits = []envoytest.Edit{envoytest.SetFilterField("envoy.filters.http.ratelimit", "failure_mode_deny", true)}
			}
			r := envoytest.Start(t, opts)
			c := envoytest.Client(t, "127.0.0.6")
			if resp := r.Do(t, c, http.MethodGet, "/"); resp.Status != http.StatusOK {
				t.Fatalf("before the outage: status %d, want 200", resp.Status)
			}

			r.Service.Stop()
			before, app := r.Envoy.RateLimitStats(t, appCluster), r.App.Requests("/")
			const n = 5
			wantStatus, wantAllowed := http.StatusOK, uint64(n)
			if deny {
				wantStatus, wantAllowed = http.StatusInternalServerError, 0
			}
			for i := 1; i <= n; i++ {
				if resp := r.Do(t, c, http.MethodGet, "/"); resp.Status != wantStatus {
					t.Errorf("service down, request %d: status %d, want %d", i, resp.Status, wantStatus)
				}
			}
			got := r.Envoy.RateLimitStats(t, appCluster).Sub(before)
			if want := (envoytest.FilterStats{Error: n, FailureModeAllowed: wantAllowed}); got != want {
				t.Errorf("service down: envoy %s, want %s", got, want)
			}
			if got, want := r.App.Requests("/")-app, int(wantAllowed); got != want {
				t.Errorf("service down: application saw %d requests, want %d", got, want)
			}

			// Restarted on the same port: Envoy reconnects and the service
			// decides again (a fresh embedded store: a full login bucket).
			r.Service.Start()
			if !testutil.Eventually(10*time.Second, func() bool {
				before := r.Envoy.RateLimitStats(t, appCluster)
				resp, err := r.DoErr(c, http.MethodGet, "/")
				return err == nil && resp.Status == http.StatusOK && r.Envoy.RateLimitStats(t, appCluster).OK == before.OK+1
			}) {
				t.Fatalf("after the restart no request was decided by the service within 10s: envoy %s", r.Envoy.RateLimitStats(t, appCluster))
			}
			for i := 1; i <= 6; i++ {
				want := http.StatusOK
				if i == 6 {
					want = http.StatusTooManyRequests
				}
				if resp := r.Do(t, c, http.MethodPost, "/login"); resp.Status != want {
					t.Errorf("after the restart, login %d: status %d, want %d", i, resp.Status, want)
				}
			}
		})
	}
	t.Run("reload under traffic", func(t *testing.T) { reloadUnderTraffic(t) })
}

// reloadUnderTraffic rewrites edge.yaml while two clients send requests: the
// bot rule goes from shadow mode to enforced. Every request is answered by
// the service (no error, no failure-mode pass), and the new rule applies
// without a restart.
func reloadUnderTraffic(t *testing.T) {
	r := envoytest.Start(t, envoytest.Options{Bootstrap: plainBootstrap, ConfigDir: configDir})
	before := r.Envoy.RateLimitStats(t, appCluster)

	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		errs     []error
		sent     int
		enforced = make(chan struct{})
		once     sync.Once
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	for i, ip := range []string{"127.0.0.7", "127.0.0.8"} {
		c := envoytest.Client(t, ip)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := r.DoErr(c, http.MethodGet, "/", "user-agent", fmt.Sprintf("ReloadBot/%d", i))
				mu.Lock()
				sent++
				if err != nil {
					errs = append(errs, err)
				} else {
					statuses[resp.Status]++
					if resp.Status == http.StatusTooManyRequests {
						once.Do(func() { close(enforced) })
					}
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	// Let shadow-mode traffic run, then swap the file in one rename.
	time.Sleep(300 * time.Millisecond)
	file := filepath.Join(r.ConfigDir, "edge.yaml")
	old, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	enforcedYAML := strings.Replace(string(old), "    shadow_mode: true\n", "", 1)
	if enforcedYAML == string(old) {
		t.Fatal("edge.yaml has no shadow_mode line to remove")
	}
	tmp := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(tmp, []byte(enforcedYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	select {
	case <-enforced:
	case <-time.After(10 * time.Second):
		t.Error("the enforced bot rule refused nothing within 10s of the reload")
	}
	time.Sleep(200 * time.Millisecond) // traffic after the reload, too
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed in transport, first: %v", len(errs), sent, errs[0])
	}
	if len(statuses) > 2 || statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != sent {
		t.Errorf("statuses %v over %d requests, want only 200 and 429", statuses, sent)
	}
	got := r.Envoy.RateLimitStats(t, appCluster).Sub(before)
	if got.Error != 0 || got.FailureModeAllowed != 0 || got.OK+got.OverLimit != uint64(sent) {
		t.Errorf("envoy %s over %d requests, want every one decided (no error)", got, sent)
	}
	if got := metric(t, r, `ratelimit_config_reloads_total{result="success"}`); got < 1 {
		t.Errorf("ratelimit_config_reloads_total{result=\"success\"} = %v, want at least 1", got)
	}
	t.Logf("reload under traffic: %d requests, statuses %v, envoy %s", sent, statuses, got)
}
