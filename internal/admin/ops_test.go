package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// shownBucket is a level of `bucket show -o json`.
type shownBucket struct {
	Level      int    `json:"level"`
	Entity     string `json:"entity"`
	Resource   string `json:"resource"`
	ShardCount int    `json:"shard_count"`
	Limits     []struct {
		Name     string  `json:"name"`
		Tokens   float64 `json:"tokens"`
		Capacity float64 `json:"capacity"`
		Consumed float64 `json:"consumed"`
	} `json:"limits"`
}

// TestBucketAndAuditAgainstLocal: bucket show prints every level of a
// chain without consuming (two shows agree), -domain and -descriptor name
// a plain rule's bucket, bucket reset -chain refills every level and
// audits it under each level's entity with the principal, and audit list
// shows every record with who made it, as a table and as JSON.
func TestBucketAndAuditAgainstLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	env := map[string]string{"DYNAMODB_TABLE": dynamotest.TableName(t), "DYNAMODB_ENDPOINT": l.Endpoint(), "NAMESPACE": "ops", "USER": "dana"}
	for _, args := range [][]string{
		{"table", "create"},
		{"entity", "create", "acme", "-cascade", "-principal", "bob"},
		{"limits", "set", "-entity", "acme", "rpm:10/day"},
		{"entity", "create", "key-1", "-parent", "acme"},
	} {
		if out, err := run(t, env, args...); err != nil {
			t.Fatalf("Run(%q) = %q, %v", args, out, err)
		}
	}
	ctx := context.Background()
	st, err := dynamo.NewStore(ctx, l.Client(t), dynamo.Config{Table: env["DYNAMODB_TABLE"], Namespace: "ops", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	defer st.Close()
	five, _ := tokenbucket.Rate(5, 24*time.Hour, 0)
	ten, _ := tokenbucket.Rate(10, 24*time.Hour, 0)
	plan := &cascade.Plan{Debits: []cascade.Debit{
		{Key: cascade.Key{Entity: "key-1", Resource: "r"}, Limit: "rpd", Bucket: five, Amount: tokenbucket.PerToken},
		{Key: cascade.Key{Entity: "acme", Resource: "r"}, Limit: "rpm", Bucket: ten, Amount: tokenbucket.PerToken, Depth: 1},
		{Key: cascade.Key{Entity: "generic_key=demo", Resource: "example"}, Limit: "rpd", Bucket: five, Amount: tokenbucket.PerToken},
	}}
	for range 2 {
		if dec, err := st.Acquire(ctx, plan); err != nil || !dec.Admitted {
			t.Fatalf("Acquire() = %+v, %v", dec, err)
		}
	}
	show := func(args ...string) []shownBucket {
		t.Helper()
		out, err := run(t, env, append([]string{"bucket", "show", "-o", "json"}, args...)...)
		var got []shownBucket
		if err != nil || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("bucket show %q = %q, %v", args, out, err)
		}
		return got
	}
	tokensOf := func(bs []shownBucket) []float64 {
		var out []float64
		for _, b := range bs {
			for _, l := range b.Limits {
				out = append(out, l.Tokens)
			}
		}
		return out
	}
	chain := show("-entity", "key-1", "-resource", "r")
	if len(chain) != 2 || chain[0].Entity != "key-1" || chain[1].Entity != "acme" || len(chain[1].Limits) != 1 {
		t.Fatalf("bucket show key-1 = %+v, want key-1 then acme", chain)
	}
	if got := tokensOf(chain); len(got) != 2 || got[0] != 3 || got[1] != 8 || chain[0].Limits[0].Consumed != 2 {
		t.Errorf("bucket show key-1 tokens = %v (consumed %v), want [3 8] after 2 decisions, 2 consumed", got, chain[0].Limits[0].Consumed)
	}
	if again := tokensOf(show("-entity", "key-1", "-resource", "r")); again[0] != 3 || again[1] != 8 {
		t.Errorf("bucket show again = %v, want [3 8]: a show consumes nothing", again)
	}
	if got := show("-domain", "example", "-descriptor", "generic_key=demo"); len(got) != 1 || got[0].Entity != "generic_key=demo" || tokensOf(got)[0] != 3 {
		t.Errorf("bucket show -domain example -descriptor generic_key=demo = %+v, want the bucket generic_key=demo holding 3", got)
	}
	// Through descriptor files, as serve resolves the request: a
	// hierarchical rule's own tier with its configured limit (no item yet:
	// full), then acme's stored level; a plain rule in a file's namespace.
	dir := t.TempDir()
	for name, yaml := range map[string]string{
		"users.yaml": "domain: example\ndescriptors:\n  - key: user\n    entity: true\n    cascade: true\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
		"other.yaml": "namespace: elsewhere\ndomain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 7}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	via := show("-domain", "example", "-descriptor", "user=key-1", "-config_dir", dir)
	if len(via) != 2 || via[0].Entity != "key-1" || via[0].Resource != "example" || via[1].Entity != "acme" || tokensOf(via)[0] != 5 || tokensOf(via)[1] != 10 {
		t.Errorf("bucket show -config_dir (user=key-1) = %+v, want key-1's tier full at 5, then acme at 10", via)
	}
	out, err := run(t, env, "bucket", "show", "-domain", "other", "-descriptor", "k=v", "-config_dir", dir, "-o", "json")
	if err != nil || !strings.Contains(out, `"namespace": "elsewhere"`) || !strings.Contains(out, `"entity": "k=v"`) || !strings.Contains(out, `"capacity": 7`) {
		t.Errorf("bucket show -config_dir (k=v) = %s, %v, want the bucket k=v of namespace elsewhere with the rule's 7", out, err)
	}
	if _, err := run(t, env, "bucket", "show", "-domain", "nowhere", "-descriptor", "k=v", "-config_dir", dir); err == nil || !strings.Contains(err.Error(), "no rule of") {
		t.Errorf("bucket show -config_dir of an unmatched request = %v, want no rule matches", err)
	}

	table, err := run(t, env, "bucket", "show", "-entity", "key-1", "-resource", "r")
	if err != nil || !strings.HasPrefix(table, "LEVEL  ENTITY  RESOURCE  SHARD  LIMIT  TOKENS  CAPACITY  FULL IN") || !strings.Contains(table, "\n1      acme    r         all    rpm    8       10") {
		t.Errorf("bucket show (table) = %q, %v", table, err)
	}

	out, err = run(t, env, "bucket", "reset", "-entity", "key-1", "-resource", "r", "-chain", "-principal", "carol")
	want := "bucket \"key-1\" resource \"r\": reset to full on 1 shard (was rpd 3 of 5), by carol\n" +
		"bucket \"acme\" resource \"r\": reset to full on 1 shard (was rpm 8 of 10), by carol\n"
	if err != nil || out != want {
		t.Fatalf("bucket reset -chain = %q, %v, want %q", out, err, want)
	}
	if got := tokensOf(show("-entity", "key-1", "-resource", "r")); got[0] != 5 || got[1] != 10 {
		t.Errorf("bucket show after the reset = %v, want [5 10]", got)
	}
	if out, err := run(t, env, "bucket", "reset", "-entity", "nobody", "-resource", "r"); err != nil || !strings.Contains(out, "nothing to reset") {
		t.Errorf("bucket reset of a bucket without an item = %q, %v, want nothing to reset", out, err)
	}

	out, err = run(t, env, "audit", "list", "-entity", "acme")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 4 || !strings.Contains(lines[1], " bob ") || !strings.Contains(lines[1], "entity.put") ||
		!strings.Contains(lines[2], " dana ") || !strings.Contains(lines[2], "limits.set") ||
		!strings.Contains(lines[3], " carol ") || !strings.Contains(lines[3], "bucket.reset") || !strings.Contains(lines[3], "rpm=8/10") {
		t.Errorf("audit list -entity acme =\n%s%v\nwant the entity by bob, its limits by dana (USER), the reset by carol", out, err)
	}
	out, err = run(t, env, "audit", "list", "-entity", "acme", "-resource", "r", "-o", "json")
	var recs []struct{ Action, Principal, Scope string }
	if err != nil || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 || recs[0].Action != "bucket.reset" || recs[0].Principal != "carol" {
		t.Errorf("audit list -entity acme -resource r -o json = %s, %v, want the reset alone", out, err)
	}

	for _, bad := range [][]string{
		{"bucket", "show", "-entity", "e"},
		{"bucket", "show", "-entity", "e", "-resource", "r", "-domain", "d"},
		{"bucket", "show", "-domain", "d", "-descriptor", "novalue"},
		{"bucket", "reset"},
		{"audit", "list", "-entity", "e", "-o", "yaml"},
		{"bucket", "show", "-entity", "e", "-resource", "r", "-config_dir", "x"},
		{"namespace", "purge", "team-x"},
	} {
		if _, err := run(t, env, bad...); !errors.Is(err, admin.ErrUsage) {
			t.Errorf("Run(%q) = %v, want a usage error", bad, err)
		}
	}
}

// TestNamespaceLifecycleAgainstLocal: delete, recover, show, list, orphans
// and purge through admin.Run on DynamoDB Local.
func TestNamespaceLifecycleAgainstLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	env := map[string]string{"DYNAMODB_TABLE": dynamotest.TableName(t), "DYNAMODB_ENDPOINT": l.Endpoint(), "USER": "dana"}
	steps := []struct {
		args []string
		want string // stdout, exactly, unless it ends with "…"
	}{
		{[]string{"table", "create"}, "…"},
		{[]string{"namespace", "register", "team-x"}, "namespace team-x id …"},
		{[]string{"limits", "set", "-namespace", "team-x", "-entity", "e", "rpm:1/min"}, "…"},
		{[]string{"limits", "set", "-namespace", "stray", "-entity", "e", "rpm:1/min"}, "…"},
		{[]string{"namespace", "delete", "team-x"}, "namespace team-x deleted by dana; its items are kept …"},
		{[]string{"namespace", "delete", "team-x"}, "namespace team-x is already deleted\n"},
		{[]string{"namespace", "list"}, "team-x\t…"},
		{[]string{"namespace", "recover", "team-x", "-principal", "erin"}, "namespace team-x recovered by erin: active\n"},
		{[]string{"namespace", "recover", "team-x"}, "namespace team-x is already active\n"},
		{[]string{"limits", "get", "-namespace", "team-x", "-entity", "e"}, "entity \"e\": rpm:1/min\n"},
		{[]string{"namespace", "orphans"}, "stray\t2\n"},
		{[]string{"namespace", "delete", "team-x"}, "…"},
		{[]string{"namespace", "purge", "team-x", "-yes"}, "namespace team-x purged by dana: 6 items deleted\n"},
		{[]string{"namespace", "purge", "stray", "-yes"}, "namespace stray purged by dana: 2 items deleted\n"},
		{[]string{"namespace", "orphans"}, ""},
		{[]string{"namespace", "show", "team-x"}, "namespace team-x id …"},
	}
	for _, st := range steps {
		out, err := run(t, env, st.args...)
		prefix, loose := strings.CutSuffix(st.want, "…")
		if err != nil || (loose && !strings.HasPrefix(out, prefix)) || (!loose && out != st.want) {
			t.Fatalf("Run(%q) = %q, %v, want %q", st.args, out, err, st.want)
		}
	}
	out, _ := run(t, env, "namespace", "show", "team-x")
	for _, w := range []string{"state purged since ", "namespace.purge by dana: state=purged, deleted 6 items"} {
		if !strings.Contains(out, w) {
			t.Errorf("namespace show team-x =\n%s\nwant %q", out, w)
		}
	}
	out, _ = run(t, env, "namespace", "list")
	if !strings.Contains(out, "team-x\t") || !strings.Contains(out, "\tpurged ") || !strings.Contains(out, "stray\t") {
		t.Errorf("namespace list =\n%s\nwant team-x and stray, purged", out)
	}
	if _, err := run(t, env, "namespace", "purge", "default", "-yes"); err != nil {
		t.Errorf("purge of an empty unregistered namespace = %v, want success (0 items)", err)
	}
	_, err := run(t, env, "namespace", "register", "live")
	if err == nil {
		_, err = run(t, env, "namespace", "purge", "live", "-yes")
	}
	if !errors.Is(err, dadmin.ErrNamespaceActive) || !strings.Contains(err.Error(), "delete it first") {
		t.Errorf("purge of an active namespace = %v, want ErrNamespaceActive saying to delete it first", err)
	}
	if _, err := run(t, env, "namespace", "delete", "ghost"); !errors.Is(err, dynamo.ErrNotFound) {
		t.Errorf("delete of an unregistered namespace = %v, want ErrNotFound", err)
	}
}
