package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestAdminAPIOnDynamoDB runs the binary on DynamoDB Local with
// ADMIN_API=true: the admin API runs on the serving process's store and
// client, so its calls count in the service's DynamoDB metrics; a reset
// through it refills a bucket the service refused (bucket show, through
// it too, reads the capacity) and is audited under the caller's
// principal, which audit list shows.
func TestAdminAPIOnDynamoDB(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "ops.yaml", opsConfig)
	p := startBinary(t, dir, dynamoEnv(t, "ADMIN_API=true", "BACKEND_TIMEOUT=2s", "ON_UNAVAILABLE=block")...)
	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	client := pb.NewRateLimitServiceClient(cc)
	admitted := func() bool {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
			Domain: "ops", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "drain")},
		})
		if err != nil {
			t.Fatalf("ShouldRateLimit() = %v", err)
		}
		return resp.GetOverallCode() == pb.RateLimitResponse_OK
	}
	url := "http://" + p.DebugAddr()
	cli := func(args ...string) string {
		t.Helper()
		out, ok := adminRun(t, []string{"USER=ops-bot"}, append(args, "-admin_url", url)...)
		if !ok {
			t.Fatalf("ratelimit %s: %s", strings.Join(args, " "), out)
		}
		return out
	}
	for i := range 4 {
		if ok := admitted(); ok != (i < 3) {
			t.Fatalf("decision %d admitted = %t, want 3 admitted (3 an hour)", i, ok)
		}
	}
	queries := scrape(t, url+"/metrics", "ratelimit_dynamodb_calls_total", `operation="Query"`)
	out := cli("bucket", "reset", "-domain", "ops", "-descriptor", "generic_key=drain", "-principal", "alice")
	if !strings.Contains(out, `bucket "generic_key=drain" resource "ops": reset to full on 1 shard (was default 0 of 3), by alice`) {
		t.Errorf("bucket reset = %q", out)
	}
	var levels []struct{ Limits []shownLimit }
	out = cli("bucket", "show", "-domain", "ops", "-descriptor", "generic_key=drain", "-o", "json")
	if err := json.Unmarshal([]byte(out), &levels); err != nil || len(levels) != 1 || len(levels[0].Limits) != 1 || levels[0].Limits[0].Tokens != 3 {
		t.Errorf("bucket show after the reset = %q (%v), want 3 tokens", out, err)
	}
	var recs []struct{ Action, Principal string }
	out = cli("audit", "list", "-entity", "generic_key=drain", "-o", "json")
	if err := json.Unmarshal([]byte(out), &recs); err != nil || len(recs) != 1 || recs[0].Action != "bucket.reset" || recs[0].Principal != "alice" {
		t.Errorf("audit list = %q (%v), want the reset by alice", out, err)
	}
	if after := scrape(t, url+"/metrics", "ratelimit_dynamodb_calls_total", `operation="Query"`); after <= queries {
		t.Errorf("ratelimit_dynamodb_calls_total{operation=\"Query\"} = %v after audit list, was %v: want the admin API's calls on the service's client", after, queries)
	}
}
