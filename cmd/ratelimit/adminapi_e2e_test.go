package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/admin"
)

// TestAdminAPIEmbedded runs the binary on the embedded store with
// ADMIN_API=true and the operator's bucket commands through its debug
// listener (the CLI with -admin_url, and plain HTTP):
//   - bucket show before and after 5 decisions differs by exactly 5 tokens
//     (less the refill of the seconds between, at 50 a day), and the shows
//     consumed nothing: the decisions' own remaining counts go 49 … 45, then
//     44 after every show;
//   - bucket reset of a bucket the service refuses refills it to its
//     capacity: the next 3 decisions are admitted, the 4th refused; the
//     reset is logged with its principal;
//   - usage on the embedded store is 501, with the reason;
//   - without ADMIN_API, /admin/ is 404.
func TestAdminAPIEmbedded(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "ops.yaml", opsConfig)
	p := startBinary(t, dir, "ADMIN_API=true", "USER=ops-bot")
	ask, cli, show := opsRig(t, p)

	before := show("show")
	if before != 50 {
		t.Errorf("bucket show of a new bucket = %v tokens, want 50 (full)", before)
	}
	for i := range 5 {
		if ok, left := ask("show"); !ok || left != uint32(49-i) {
			t.Fatalf("decision %d = %t, %d left; want admitted, %d left", i, ok, left, 49-i)
		}
	}
	after, again := show("show"), show("show")
	if d := before - after; math.Abs(d-5) > 0.01 {
		t.Errorf("bucket show %v then %v: differs by %v, want 5", before, after, d)
	}
	if math.Abs(after-again) > 0.01 {
		t.Errorf("bucket show twice = %v then %v, want the same", after, again)
	}
	if ok, left := ask("show"); !ok || left != 44 {
		t.Errorf("decision after the shows = %t, %d left; want admitted, 44 left: a show consumes nothing", ok, left)
	}

	// Reset a bucket the service refuses.
	for i := range 3 {
		if ok, _ := ask("drain"); !ok {
			t.Fatalf("drain decision %d refused, want admitted (3 an hour)", i)
		}
	}
	if ok, _ := ask("drain"); ok {
		t.Fatal("drain admitted a 4th, want it refused")
	}
	out := cli("bucket", "reset", "-domain", "ops", "-descriptor", "generic_key=drain", "-principal", "alice")
	if !strings.Contains(out, `bucket "generic_key=drain" resource "ops": reset to full on 1 shard (was default 0 of 3), by alice`) {
		t.Errorf("bucket reset = %q", out)
	}
	if got := show("drain"); got != 3 {
		t.Errorf("bucket show after the reset = %v tokens, want the capacity, 3", got)
	}
	for i := range 4 {
		if ok, _ := ask("drain"); ok != (i < 3) {
			t.Errorf("decision %d after the reset admitted = %t, want the capacity, 3, admitted", i, ok)
		}
	}
	if o := p.Output(); !strings.Contains(o, `"action":"bucket.reset"`) || !strings.Contains(o, `"principal":"alice"`) {
		t.Errorf("the service's log lacks the reset by alice:\n%s", lastLines(o, 5))
	}

	// What the embedded store cannot do says so.
	code, body := httpGet(t, "http://"+p.DebugAddr()+"/admin/usage/list?entity=acme")
	if code != http.StatusNotImplemented || !strings.Contains(body, "embedded store") {
		t.Errorf("GET /admin/usage/list = %d %q, want 501 naming the embedded store", code, body)
	}

	// Off unless enabled.
	off := startBinary(t, dir)
	code, body = httpGet(t, "http://"+off.DebugAddr()+admin.APIPrefix+"bucket/show?entity=e&resource=ops")
	if code != http.StatusNotFound {
		t.Errorf("GET /admin/bucket/show without ADMIN_API = %d %q, want 404", code, body)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// opsRig is how the admin API tests drive a binary serving opsConfig with
// ADMIN_API=true: ask decides one generic_key value over gRPC (admitted,
// remaining), cli runs the CLI against its admin API as ops-bot, show
// reads a value's one limit with bucket show.
func opsRig(t *testing.T, p *proc) (ask func(string) (bool, uint32), cli func(...string) string, show func(string) float64) {
	t.Helper()
	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	client := pb.NewRateLimitServiceClient(cc)
	ask = func(value string) (bool, uint32) {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
			Domain: "ops", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", value)},
		})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s) = %v", value, err)
		}
		return resp.GetOverallCode() == pb.RateLimitResponse_OK, resp.GetStatuses()[0].GetLimitRemaining()
	}
	url := "http://" + p.DebugAddr()
	cli = func(args ...string) string {
		t.Helper()
		out, ok := adminRun(t, []string{"USER=ops-bot"}, append(args, "-admin_url", url)...)
		if !ok {
			t.Fatalf("ratelimit %s: %s", strings.Join(args, " "), out)
		}
		return out
	}
	show = func(value string) float64 {
		t.Helper()
		out := cli("bucket", "show", "-domain", "ops", "-descriptor", "generic_key="+value, "-o", "json")
		var levels []struct{ Limits []shownLimit }
		if err := json.Unmarshal([]byte(out), &levels); err != nil || len(levels) != 1 || len(levels[0].Limits) != 1 {
			t.Fatalf("bucket show %s = %q (%v), want one level with one limit", value, out, err)
		}
		return levels[0].Limits[0].Tokens
	}
	return ask, cli, show
}
