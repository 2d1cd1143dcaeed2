//go:build envoybench

package envoyload

import (
	"context"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// edgeRule is 10 a minute.
var edgeRule = rule{10, "minute"}

// TestWindowEdge drives a limit of 10 a minute across a minute's edge, on
// ours on Redis and on envoyproxy/ratelimit on Redis (when bench-peers finds
// it): 10 requests half a second before the edge and 10 half a second
// after it. A fixed window counts each minute apart and admits up to 20
// within that second (envoyproxy/ratelimit#32); a token bucket admits 10,
// and one more per 6 s of refill. Ours must admit at most 10 + 1.
//
//	go test -tags envoybench -run '^TestWindowEdge$' -count=1 -v ./internal/bench/envoyload
func TestWindowEdge(t *testing.T) {
	root := testutil.RepoRoot(t)
	peers := locatePeers(t, root)
	servers := []string{"ours-redis"}
	if peers.found["envoyratelimit"] != "" {
		servers = append(servers, "envoyratelimit")
	} else {
		t.Logf("envoyproxy/ratelimit: %s", peers.missing["envoyratelimit"])
	}
	got := map[string]int{}
	for _, name := range servers {
		s := startRLS(t, name, peers, edgeRule)
		cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := pb.NewRateLimitServiceClient(cc)
		// Half a second before the next minute's edge.
		now := time.Now()
		edge := now.Truncate(time.Minute).Add(time.Minute)
		if edge.Sub(now) < 2*time.Second {
			edge = edge.Add(time.Minute)
		}
		time.Sleep(time.Until(edge.Add(-500 * time.Millisecond)))
		ok := 0
		ask := func() {
			resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: peersDomain,
				Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: descriptorKey, Value: "edge"}}}}})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if resp.GetOverallCode() == pb.RateLimitResponse_OK {
				ok++
			}
		}
		for range 10 {
			ask()
		}
		time.Sleep(time.Until(edge.Add(500 * time.Millisecond)))
		for range 10 {
			ask()
		}
		got[name] = ok
		t.Logf("%s: 10 a minute, 10 asked 0.5 s before a minute's edge and 10 asked 0.5 s after: %d admitted", name, ok)
	}
	if got["ours-redis"] > 11 {
		t.Errorf("ours on Redis admitted %d across the edge, want at most 10 and a token of refill", got["ours-redis"])
	}
}
