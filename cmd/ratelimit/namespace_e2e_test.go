package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// adminRun runs the binary's admin command args as a subprocess with env
// added, and returns its output and whether it exited 0.
func adminRun(t *testing.T, env []string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("ratelimit %s: %v", strings.Join(args, " "), err)
	}
	return string(out), err == nil
}

// TestNamespacesIsolateOnOneTable runs two binaries on one DynamoDB Local
// table with NAMESPACE=team-a and NAMESPACE=team-b and one descriptor file
// that names no namespace. Each admits exactly its own 3 per minute (6 in
// all); limits stored and an entity created with the admin commands under
// team-a are enforced and seen by team-a only; /rlconfig shows each rule's
// namespace; and a Scan of the table finds every item under nteam-a/,
// nteam-b/ or the system prefix _/, none under ndefault/.
func TestNamespacesIsolateOnOneTable(t *testing.T) {
	env := dynamoEnv(t, "BACKEND_TIMEOUT=2s", "ON_UNAVAILABLE=block", "LOG_LEVEL=warn")
	teamA := append(append([]string(nil), env...), "NAMESPACE=team-a")
	teamB := append(append([]string(nil), env...), "NAMESPACE=team-b")

	// Stored limits and an entity, through the binary's admin commands,
	// before the replicas start (a replica trusts what it read for
	// CONFIG_CACHE_TTL).
	scope := []string{"-entity", "generic_key=plenty", "-resource", "e2e"}
	if out, ok := adminRun(t, teamA, append(append([]string{"limits", "set"}, scope...), "default:5/hour")...); !ok {
		t.Fatalf("team-a: ratelimit limits set: %s", out)
	}
	if out, ok := adminRun(t, teamA, append([]string{"limits", "get"}, scope...)...); !ok || !strings.Contains(out, "default:5/hour") {
		t.Errorf("team-a: ratelimit limits get = %q (exit 0: %t), want default:5/hour", out, ok)
	}
	if out, ok := adminRun(t, teamB, append([]string{"limits", "get"}, scope...)...); ok || strings.Contains(out, "5/hour") {
		t.Errorf("team-b: ratelimit limits get = %q (exit 0: %t), want not found", out, ok)
	}
	if out, ok := adminRun(t, teamA, "entity", "create", "tenant-x"); !ok {
		t.Fatalf("team-a: ratelimit entity create: %s", out)
	}
	if out, ok := adminRun(t, teamA, "entity", "show", "tenant-x"); !ok || !strings.Contains(out, `entity "tenant-x"`) {
		t.Errorf("team-a: ratelimit entity show = %q (exit 0: %t), want the entity", out, ok)
	}
	if out, ok := adminRun(t, teamB, "entity", "show", "tenant-x"); ok || strings.Contains(out, `entity "tenant-x" parent`) {
		t.Errorf("team-b: ratelimit entity show = %q (exit 0: %t), want not found", out, ok)
	}

	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig) // no namespace: key
	procs := map[string]*proc{"team-a": startBinary(t, dir, teamA...), "team-b": startBinary(t, dir, teamB...)}
	clients := map[string]pb.RateLimitServiceClient{}
	for ns, p := range procs {
		cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		clients[ns] = pb.NewRateLimitServiceClient(cc)
	}
	ask := func(ns, value string) *pb.RateLimitResponse {
		t.Helper()
		resp, err := clients[ns].ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
			Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", value)},
		})
		if err != nil {
			t.Fatalf("%s: ShouldRateLimit(%s) = %v", ns, value, err)
		}
		return resp
	}

	// Interleaved, 5 each: each binary admits its own 3.
	admitted := map[string]int{}
	for range 5 {
		for _, ns := range []string{"team-a", "team-b"} {
			if ask(ns, "three").GetOverallCode() == pb.RateLimitResponse_OK {
				admitted[ns]++
			}
		}
	}
	if admitted["team-a"] != 3 || admitted["team-b"] != 3 {
		t.Errorf("admitted team-a %d, team-b %d of 5 each, want 3 and 3 (6 in all: neither sees the other's bucket)", admitted["team-a"], admitted["team-b"])
	}

	// The stored limit applies in team-a only.
	for _, c := range []struct {
		ns   string
		rpu  uint32
		unit pb.RateLimitResponse_RateLimit_Unit
	}{{"team-a", 5, pb.RateLimitResponse_RateLimit_HOUR}, {"team-b", 100, pb.RateLimitResponse_RateLimit_MINUTE}} {
		got := ask(c.ns, "plenty").GetStatuses()[0].GetCurrentLimit()
		if got.GetRequestsPerUnit() != c.rpu || got.GetUnit() != c.unit {
			t.Errorf("%s: current_limit of generic_key=plenty = %v, want %d per %v", c.ns, got, c.rpu, c.unit)
		}
	}

	// /rlconfig shows the namespace each rule really uses.
	for ns, p := range procs {
		resp, err := http.Get("http://" + p.DebugAddr() + "/rlconfig")
		if err != nil {
			t.Fatalf("%s: GET /rlconfig: %v", ns, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if n := strings.Count(string(body), ", namespace: "+ns+"\n"); n != 2 {
			t.Errorf("%s: /rlconfig =\n%s\nwant both rules in namespace %s", ns, body, ns)
		}
	}

	// Every item of the table, by namespace.
	client := dynamotest.Shared(t).Client(t)
	var table string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "DYNAMODB_TABLE="); ok {
			table = v
		}
	}
	byPrefix := map[string][]string{}
	var start map[string]types.AttributeValue
	for {
		res, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatalf("Scan(%s) = %v", table, err)
		}
		for _, it := range res.Items {
			pk := it["PK"].(*types.AttributeValueMemberS).Value
			prefix := "other"
			for _, p := range []string{"nteam-a/", "nteam-b/", "_/", "ndefault/"} {
				if strings.HasPrefix(pk, p) {
					prefix = p
				}
			}
			byPrefix[prefix] = append(byPrefix[prefix], strings.TrimPrefix(pk, prefix)+" "+it["SK"].(*types.AttributeValueMemberS).Value)
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	if n := len(byPrefix["other"]) + len(byPrefix["ndefault/"]); n != 0 {
		t.Errorf("%d items outside nteam-a/, nteam-b/ and _/: %v under ndefault/, %v elsewhere", n, byPrefix["ndefault/"], byPrefix["other"])
	}
	for _, p := range []string{"nteam-a/", "nteam-b/"} {
		buckets := 0
		for _, k := range byPrefix[p] {
			if strings.HasPrefix(k, "BUCKET#") {
				buckets++
			}
		}
		if buckets != 2 {
			t.Errorf("%d bucket items under %s, want 2 (three, plenty): %v", buckets, p, byPrefix[p])
		}
	}
	var admin bytes.Buffer
	for _, k := range byPrefix["nteam-b/"] {
		// Besides its buckets, a replica writes only its warm-up items
		// (dynamo.Store.Warm), under its own namespace too.
		if !strings.HasPrefix(k, "BUCKET#") && !strings.HasPrefix(k, "WARMUP#") {
			admin.WriteString(k + "; ")
		}
	}
	if admin.Len() > 0 {
		t.Errorf("items under nteam-b/ other than its buckets: %s; team-b wrote no limits or entities", admin.String())
	}
	t.Logf("items: %d under nteam-a/, %d under nteam-b/, %d under _/", len(byPrefix["nteam-a/"]), len(byPrefix["nteam-b/"]), len(byPrefix["_/"]))
}
