package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

const opsConfig = `domain: ops
descriptors:
  - key: generic_key
    value: show
    rate_limit:
      unit: day
      requests_per_unit: 50
  - key: generic_key
    value: drain
    rate_limit:
      unit: hour
      requests_per_unit: 3
`

// shownLimit is a limit of `ratelimit bucket show -o json`.
type shownLimit struct {
	Tokens   float64 `json:"tokens"`
	Consumed float64 `json:"consumed"`
}

// opsStore is a store the operator's scenario (operatorCommands) runs on.
type opsStore struct {
	// env are the replicas' settings, NAMESPACE=team-a and USER=ops-bot
	// among them.
	env []string
	// run runs an operator's command line in namespace ns on the
	// replicas' store, and returns its output and whether it exited 0.
	run func(t *testing.T, replicas []*proc, ns string, args ...string) (string, bool)
	// items lists the items of namespace ns in the store, each printed
	// whole.
	items func(t *testing.T, ns string) []string
	// auditMark is in the printed item of an audit record.
	auditMark string
	// noCounter: bucket show reports no usage counter (consumed is 0);
	// the scenario checks the tokens instead.
	noCounter bool
}

// TestOperatorCommands runs the operator's commands through the binary
// against two replicas on one DynamoDB Local table (operatorCommands).
func TestOperatorCommands(t *testing.T) {
	env := dynamoEnv(t, "BACKEND_TIMEOUT=2s", "ON_UNAVAILABLE=block", "LOG_LEVEL=warn", "NAMESPACE=team-a", "USER=ops-bot", "CONFIG_CACHE_TTL=500ms")
	table := lookup(env)("DYNAMODB_TABLE")
	client := dynamotest.Shared(t).Client(t)
	operatorCommands(t, opsStore{
		env: env,
		run: func(t *testing.T, _ []*proc, ns string, args ...string) (string, bool) {
			return adminRun(t, append(append([]string(nil), env...), "NAMESPACE="+ns), args...)
		},
		items:     func(t *testing.T, ns string) []string { return scanPrefix(t, client, table, "n"+ns+"/") },
		auditMark: "AUDIT",
	})
}

// operatorCommands runs the operator's commands through the binary
// against two replicas on one store st:
//   - bucket show before and after 5 decisions over gRPC differs by exactly
//     5 consumed (and 5 tokens, within the refill of the seconds between),
//     and two shows in a row consume nothing;
//   - bucket reset of a bucket both replicas refused: the next decisions,
//     alternating between the replicas, are admitted up to the capacity
//     (3), and audit list shows who reset it and when;
//   - namespace delete: both replicas stop deciding for the namespace's
//     rules within CONFIG_CACHE_TTL (admitted, its buckets untouched);
//     recover: the old buckets serve again (still drained);
//   - namespace purge of team-a (after refusing without -yes): team-b's
//     items are as they were, and nothing of team-a is left but the
//     purge's audit record.
func operatorCommands(t *testing.T, st opsStore) {
	env := st.env
	dir := t.TempDir()
	writeConfig(t, dir, "ops.yaml", opsConfig)
	replicas := []*proc{startBinary(t, dir, env...), startBinary(t, dir, env...)}
	clients := make([]pb.RateLimitServiceClient, len(replicas))
	for i, p := range replicas {
		cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		clients[i] = pb.NewRateLimitServiceClient(cc)
	}
	ask := func(replica int, value string) bool {
		t.Helper()
		resp, err := clients[replica].ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
			Domain: "ops", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", value)},
		})
		if err != nil {
			t.Fatalf("replica %d: ShouldRateLimit(%s) = %v", replica, value, err)
		}
		return resp.GetOverallCode() == pb.RateLimitResponse_OK
	}
	run := func(ns string, args ...string) (string, bool) { return st.run(t, replicas, ns, args...) }
	admin := func(ns string, args ...string) string {
		t.Helper()
		out, ok := run(ns, args...)
		if !ok {
			t.Fatalf("ratelimit %s: %s", strings.Join(args, " "), out)
		}
		return out
	}
	show := func(value string) shownLimit {
		t.Helper()
		out := admin("team-a", "bucket", "show", "-domain", "ops", "-descriptor", "generic_key="+value, "-o", "json")
		var levels []struct{ Limits []shownLimit }
		if err := json.Unmarshal([]byte(out), &levels); err != nil || len(levels) != 1 || len(levels[0].Limits) != 1 {
			t.Fatalf("bucket show %s = %q (%v), want one level with one limit", value, out, err)
		}
		return levels[0].Limits[0]
	}

	// bucket show does not consume; 5 decisions take 5.
	ask(0, "show") // the bucket's item exists
	before, again := show("show"), show("show")
	if again.Consumed != before.Consumed || again.Tokens < before.Tokens {
		t.Errorf("bucket show twice = %+v then %+v, want nothing consumed by a show", before, again)
	}
	for i := range 5 {
		if !ask(i%2, "show") {
			t.Fatalf("decision %d on show refused, want admitted (50 a day)", i)
		}
	}
	after := show("show")
	if d := after.Consumed - before.Consumed; d != 5 && !st.noCounter {
		t.Errorf("bucket show consumed %v then %v: differs by %v, want exactly 5", before.Consumed, after.Consumed, d)
	}
	if d := before.Tokens - after.Tokens; math.Abs(d-5) > 0.01 {
		t.Errorf("bucket show tokens %v then %v: differs by %v, want 5 (less the refill of a few seconds at 50 a day)", before.Tokens, after.Tokens, d)
	}

	// reset a bucket both replicas refused.
	for i := range 3 {
		if !ask(i%2, "drain") {
			t.Fatalf("drain decision %d refused, want admitted (3 an hour)", i)
		}
	}
	if ask(0, "drain") || ask(1, "drain") {
		t.Fatalf("drain admitted a 4th, want both replicas to refuse")
	}
	resetAt := time.Now()
	out := admin("team-a", "bucket", "reset", "-entity", "generic_key=drain", "-resource", "ops", "-principal", "alice")
	if !strings.Contains(out, "reset to full on 1 shard (was default 0 of 3), by alice") {
		t.Errorf("bucket reset = %q", out)
	}
	time.Sleep(1100 * time.Millisecond) // refusals cached by the replicas end within a second
	admitted := 0
	for i := range 6 {
		if ask(i%2, "drain") {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("after the reset, %d of 6 decisions across both replicas admitted, want the capacity, 3", admitted)
	}
	var recs []struct {
		At        time.Time
		Principal string
		Action    string
	}
	if err := json.Unmarshal([]byte(admin("team-a", "audit", "list", "-entity", "generic_key=drain", "-o", "json")), &recs); err != nil || len(recs) != 1 {
		t.Fatalf("audit list = %+v, %v, want the reset", recs, err)
	}
	if r := recs[0]; r.Action != "bucket.reset" || r.Principal != "alice" || r.At.Before(resetAt.Add(-time.Second)) || r.At.After(resetAt.Add(10*time.Second)) {
		t.Errorf("audit record = %+v, want bucket.reset by alice at about %v", r, resetAt)
	}

	// drained: the bucket holds what 6 admitted decisions left (3 an
	// hour: the refill of the seconds since is a few thousandths).
	drained := func(l shownLimit) bool {
		if st.noCounter {
			return l.Tokens < 0.1
		}
		return l.Consumed == 6
	}

	// delete: the replicas stop deciding for team-a's rules (every request
	// admitted, no bucket touched) within CONFIG_CACHE_TTL; recover: the
	// old buckets serve again, as they were.
	admin("team-a", "namespace", "register", "team-a")
	admin("team-a", "namespace", "register", "team-b")
	admin("team-a", "namespace", "delete", "team-a")
	eventually(t, "both replicas answer drain OK after the delete", func() bool { return ask(0, "drain") && ask(1, "drain") })
	for i := range 4 {
		if !ask(i%2, "drain") {
			t.Errorf("drain refused on replica %d while team-a is deleted, want OK: its rules are not decided", i%2)
		}
	}
	if got := show("drain"); !drained(got) {
		t.Errorf("bucket show drain while team-a is deleted = %+v, want the 6 consumed before: no decision touched it", got)
	}
	admin("team-a", "namespace", "recover", "team-a")
	eventually(t, "both replicas refuse drain after the recover", func() bool { return !ask(0, "drain") && !ask(1, "drain") })
	if got := show("drain"); !drained(got) {
		t.Errorf("bucket show drain after recover = %+v, want the old bucket: 6 consumed, nothing more", got)
	}

	// purge team-a: team-b's items stay as they were.
	admin("team-b", "limits", "set", "-entity", "generic_key=show", "-resource", "ops", "rpd:7/day")
	admin("team-b", "entity", "create", "tenant-b")
	admin("team-b", "bucket", "reset", "-entity", "nothing", "-resource", "ops")
	itemsB := st.items(t, "team-b")
	if len(itemsB) < 4 {
		t.Fatalf("team-b has %d items, want its limits, entity and their audit records", len(itemsB))
	}
	if out, ok := run("team-a", "namespace", "purge", "team-a"); ok || !strings.Contains(out, "add -yes to confirm") {
		t.Errorf("purge without -yes = %q (exit 0: %t), want a refusal", out, ok)
	}
	admin("team-a", "namespace", "delete", "team-a")
	out = admin("team-a", "namespace", "purge", "team-a", "-yes")
	if !strings.Contains(out, "namespace team-a purged by ops-bot: ") {
		t.Errorf("purge = %q", out)
	}
	if got := st.items(t, "team-b"); !equalItems(got, itemsB) {
		t.Errorf("team-b's items after purging team-a: %d, want the %d there before, unchanged", len(got), len(itemsB))
	}
	if left := st.items(t, "team-a"); len(left) != 1 || !strings.Contains(left[0], st.auditMark) || !strings.Contains(left[0], "namespace.purge") {
		t.Errorf("team-a's items after its purge = %v, want only the purge's audit record", left)
	}
}

// scanPrefix returns every item of table whose PK begins with prefix, each
// as its attributes printed in a stable order.
func scanPrefix(t *testing.T, client *dynamodb.Client, table, prefix string) []string {
	t.Helper()
	var out []string
	var start map[string]types.AttributeValue
	for {
		res, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatalf("Scan(%s) = %v", table, err)
		}
		for _, it := range res.Items {
			if pk := it["PK"].(*types.AttributeValueMemberS).Value; strings.HasPrefix(pk, prefix) {
				out = append(out, itemString(it))
			}
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return out
		}
	}
}

// itemString prints an item's attributes sorted by name.
func itemString(it map[string]types.AttributeValue) string {
	return avString(&types.AttributeValueMemberM{Value: it})
}

// avString prints an attribute value, maps sorted by key.
func avString(av types.AttributeValue) string {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return strconv.Quote(v.Value)
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberBOOL:
		return strconv.FormatBool(v.Value)
	case *types.AttributeValueMemberM:
		names := slices.Sorted(maps.Keys(v.Value))
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = n + "=" + avString(v.Value[n])
		}
		return "{" + strings.Join(parts, " ") + "}"
	case *types.AttributeValueMemberL:
		parts := make([]string, len(v.Value))
		for i, e := range v.Value {
			parts[i] = avString(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprintf("%T", av)
}

func equalItems(a, b []string) bool {
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// eventually polls cond every 100 ms for up to 10 s, and fails t naming
// what when it never holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 10 s", what)
}
