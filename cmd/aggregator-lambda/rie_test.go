package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// The Lambda Runtime Interface Emulator the binary is run under, built
// with go install into .cache/aws-lambda-rie/ (about 10 s, once).
const (
	rieModule  = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"
	rieVersion = "v0.0.0-20261030222936-bef5c4ba774d"
)

var (
	rieOnce sync.Once
	rieBin  string
	rieErr  error
)

func rie(t *testing.T) string {
	t.Helper()
	rieOnce.Do(func() { rieBin, rieErr = testutil.InstallTool(testutil.RepoRoot(t), rieModule, rieVersion) })
	if rieErr != nil {
		t.Fatal(rieErr)
	}
	return rieBin
}

// invoke posts a DynamoDB event to the emulator and decodes the answer.
func invoke(t *testing.T, url, ev string) map[string]any {
	t.Helper()
	resp, err := http.Post(url+"/2015-03-31/functions/function/invocations", "application/json", strings.NewReader(ev))
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil {
		t.Fatalf("invoke = %s %s, want 200 and a JSON object", resp.Status, body)
	}
	return out
}

// snapshots returns the usage snapshot items of table t, ttl left out (a
// snapshot's is its window's end plus the retention, the same for both).
func snapshots(f *dynamotest.Fake) map[string]string {
	out := map[string]string{}
	for _, it := range f.Items("t") {
		sk := it["SK"].(*types.AttributeValueMemberS).Value
		if !strings.HasPrefix(sk, "#USAGE#") {
			continue
		}
		var attrs []string
		for _, k := range slices.Sorted(maps.Keys(it)) {
			if v, ok := it[k].(*types.AttributeValueMemberN); ok {
				attrs = append(attrs, k+"="+v.Value)
			} else if v, ok := it[k].(*types.AttributeValueMemberS); ok && k != "PK" && k != "SK" {
				attrs = append(attrs, k+"="+v.Value)
			}
		}
		out[it["PK"].(*types.AttributeValueMemberS).Value+" "+sk] = strings.Join(attrs, " ")
	}
	return out
}

// TestUnderEmulator runs the real binary under aws-lambda-rie, talking
// HTTP to a fake table: the event's records write the same snapshots as
// the handler in process on a table of its own, delivering the event again
// changes nothing, and when the table throttles every record with usage is
// reported by its sequence number (the entity record's has none to fail).
func TestUnderEmulator(t *testing.T) {
	bootstrap := testutil.Build(t, "./cmd/aggregator-lambda")
	f := dynamotest.NewFakeTable(t, "t")
	addr, api := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cmd := exec.Command(rie(t), "--runtime-interface-emulator-address", addr, "--runtime-api-address", api, bootstrap)
	cmd.Env = append(os.Environ(), "DYNAMODB_TABLE=t", "AWS_REGION=us-east-1", "DYNAMODB_ENDPOINT="+dynamotest.Serve(t, f), "USAGE_RETENTION=720h")
	testutil.StartProcess(t, "aws-lambda-rie", cmd, testutil.Accepting(addr))
	url := "http://" + addr

	if out := invoke(t, url, event); !reflect.DeepEqual(out, map[string]any{"batchItemFailures": []any{}}) {
		t.Fatalf("invoke() = %v, want no failures", out)
	}
	got := snapshots(f)
	if len(got) != 6 || !strings.Contains(got["nacme/ENTITY#team #USAGE#api#h2026112614"], "u_rpm=1000") {
		t.Errorf("snapshots = %v, want hourly, daily and monthly of team and other", got)
	}
	invoke(t, url, event)
	if again := snapshots(f); !reflect.DeepEqual(again, got) {
		t.Errorf("snapshots after the event again = %v, want %v", again, got)
	}

	inProcess := dynamotest.NewFakeTable(t, "t")
	h := &handler{log: quiet(), open: func(ctx context.Context) (usage.Writer, error) {
		st, err := dynamo.NewStore(ctx, inProcess, dynamo.Config{Table: "t", UsageRetention: 720 * time.Hour})
		if err != nil {
			return nil, err
		}
		return usage.Of(st), nil
	}}
	if _, err := h.Handle(context.Background(), decode(t)); err != nil {
		t.Fatal(err)
	}
	if want := snapshots(inProcess); !reflect.DeepEqual(got, want) {
		t.Errorf("snapshots under the emulator = %v, in process = %v", got, want)
	}

	f.SetFail(func(_ context.Context, op string) error {
		if op == "TransactWriteItems" {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
		}
		return nil
	})
	var ev map[string]any
	_ = json.Unmarshal([]byte(event), &ev)
	for i, r := range ev["Records"].([]any) {
		r.(map[string]any)["eventID"] = "new-" + strconv.Itoa(i)
	}
	b, _ := json.Marshal(ev)
	want := map[string]any{"batchItemFailures": []any{map[string]any{"itemIdentifier": "100"}, map[string]any{"itemIdentifier": "200"}}}
	if out := invoke(t, url, string(bytes.TrimSpace(b))); !reflect.DeepEqual(out, want) {
		t.Errorf("invoke(throttled) = %v, want %v", out, want)
	}
}
