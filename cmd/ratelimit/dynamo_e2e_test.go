package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

// dynamoEnv returns the settings of a fresh table on the shared DynamoDB
// Local, plus extra, after creating the table with `ratelimit table
// create` as a user would.
func dynamoEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	return dynamoEnvAt(t, dynamotest.Shared(t), extra...)
}

// dynamoEnvAt is dynamoEnv on the DynamoDB Local local.
func dynamoEnvAt(t *testing.T, local *dynamotest.Local, extra ...string) []string {
	t.Helper()
	env := tableEnv(t, local.Endpoint(), extra...)
	local.DropAtCleanup(t, lookup(env)("DYNAMODB_TABLE"))
	return env
}

// tableEnv returns the settings of a replica on a new table at the
// DynamoDB endpoint, with extra, after creating the table as an operator
// would (ratelimit table create).
func tableEnv(t *testing.T, endpoint string, extra ...string) []string {
	t.Helper()
	env := append([]string{
		"BACKEND_TYPE=dynamodb",
		"DYNAMODB_ENDPOINT=" + endpoint,
		"DYNAMODB_TABLE=" + dynamotest.TableName(t),
		"AWS_REGION=us-east-1",
	}, extra...)
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"table", "create"}, lookup(env), &out, &out); code != 0 {
		t.Fatalf("ratelimit table create = exit %d:\n%s", code, out.String())
	}
	return env
}

// lookup returns the value of a setting in env (the last one wins), "" when
// env does not set it: Main's getenv.
func lookup(env []string) func(string) string {
	return func(k string) string {
		v := ""
		for _, kv := range env {
			if rest, ok := strings.CutPrefix(kv, k+"="); ok {
				v = rest
			}
		}
		return v
	}
}

// TestTwoBinariesShareDynamoDB runs two replicas of the binary on one
// DynamoDB Local table: a 3-per-minute rule admits exactly 3 requests across
// both.
func TestTwoBinariesShareDynamoDB(t *testing.T) {
	// DynamoDB Local serialises writes at ~3 ms each and this machine is
	// shared with other tests: a generous deadline, and failures refuse.
	env := dynamoEnv(t, "BACKEND_TIMEOUT=2s", "ON_UNAVAILABLE=block")

	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	replicas := []*proc{startBinary(t, dir, env...), startBinary(t, dir, env...)}
	clients := make([]pb.RateLimitServiceClient, len(replicas))
	for i, p := range replicas {
		cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		clients[i] = pb.NewRateLimitServiceClient(cc)
	}

	admitted := 0
	var codes []string
	for i := range 8 {
		resp, err := clients[i%2].ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
			Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "three")},
		})
		if err != nil {
			t.Fatalf("call %d on replica %d: %v", i+1, i%2, err)
		}
		codes = append(codes, fmt.Sprintf("r%d:%v", i%2, resp.GetOverallCode()))
		if resp.GetOverallCode() == pb.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted %d of 8 across two replicas, want exactly 3: %v", admitted, codes)
	}
}
