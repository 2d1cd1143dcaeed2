package cfntest

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/streampoll"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/dynalimit/dynalimit/pkg/dynamo/warm"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// doublings counts the store's shard doublings.
type doublings struct{ n atomic.Int64 }

func (d *doublings) ShardDoubled()           { d.n.Add(1) }
func (*doublings) ShardMerged()              {}
func (*doublings) RejectionCacheHit()        {}
func (*doublings) Contended(string)          {}
func (*doublings) Batched(int, int)          {}
func (*doublings) ClockBehind(time.Duration) {}
func (*doublings) GaveBack(string)           {}
func (*doublings) GiveBacksPending(int)      {}

// nsA is the namespace the recorded calls use.
const nsA = "team-a"

// TestPoliciesGrantExactlyTheCallsMade records every DynamoDB call of each
// role on DynamoDB Local and checks the template's policies against them;
// then removes each action from the template in turn, and each copy must
// fail the check.
func TestPoliciesGrantExactlyTheCallsMade(t *testing.T) {
	l := dynamotest.Shared(t)
	rec := newRecorder(t, l.Endpoint())
	table := dynamotest.TableName(t)
	l.DropAtCleanup(t, table)
	ctx := context.Background()
	env := map[string]string{"DYNAMODB_TABLE": table, "DYNAMODB_ENDPOINT": rec.Endpoint(), "AWS_REGION": "us-east-1", "NAMESPACE": nsA, "BACKEND_TIMEOUT": "2s"}
	run := func(args ...string) {
		t.Helper()
		rec.Step(strings.Join(args[:2], " "))
		var out, errOut bytes.Buffer
		if err := admin.Run(ctx, args, func(k string) string { return env[k] }, &out, &errOut); err != nil {
			t.Fatalf("ratelimit %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
	}
	var rc roleCalls

	// table-admin: `table create`, on a new table and again on the table
	// it made (as on a table the stack made).
	run("table", "create")
	run("table", "create")
	rc.tableAdmin = rec.Take()

	// admin: every command but table create.
	run("namespace", "register", nsA)
	registered := rec.Take()
	run("namespace", "list")
	run("limits", "set", "-system", "rpm:1000/min")
	run("limits", "set", "-resource", "r", "default:100/min")
	run("limits", "set", "-entity", "acme", "rpm:50/min")
	run("limits", "set", "-entity", "scratch", "-resource", "r", "rpm:5/min", "tpm:10/min")
	run("limits", "get", "-entity", "acme")
	run("limits", "delete", "-entity", "scratch", "-resource", "r", "tpm")
	run("limits", "delete", "-entity", "scratch", "-resource", "r")
	run("entity", "create", "acme", "-cascade")
	run("entity", "create", "key-1", "-parent", "acme")
	run("entity", "show", "key-1", "-resource", "r")
	run("entity", "show", "acme")
	rc.adminScoped = rec.Take()
	rc.admin = append(registered, rc.adminScoped...)

	// read-only: the commands that only read.
	run("namespace", "list")
	run("limits", "get", "-system")
	run("limits", "get", "-entity", "acme")
	run("entity", "show", "key-1", "-resource", "r")
	run("entity", "show", "acme")
	rc.readOnly = rec.Take()

	// decide: what serve does with the store.
	client, err := dynamo.NewClient(ctx, rec.Endpoint(), "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	obs := &doublings{}
	rec.Step("NewStore")
	st, err := dynamo.NewStore(ctx, client, dynamo.Config{Table: table, Namespace: nsA, Timeout: 2 * time.Second}, dynamo.WithObserver(obs))
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	defer st.Close()
	rec.Step("Warm")
	if _, err := warm.Run(ctx, st.Table(), warm.Options{Conns: 2}); err != nil {
		t.Fatalf("Warm() = %v", err)
	}
	lim := func(spec string) tokenbucket.Limit {
		_, l, err := dadmin.ParseLimit(spec)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	key := func(entity string) cascade.Key { return cascade.Key{Namespace: nsA, Entity: entity, Resource: "r"} }
	debit := func(entity, spec string, n int64, op cascade.Op) cascade.Debit {
		return cascade.Debit{Key: key(entity), Limit: strings.Split(spec, ":")[0], Bucket: lim(spec), Amount: tokenbucket.Millitokens(n) * tokenbucket.PerToken, Op: op}
	}
	acquire := func(step string, p *cascade.Plan) cascade.Decision {
		t.Helper()
		rec.Step(step)
		d, err := st.Acquire(ctx, p)
		if err != nil {
			t.Fatalf("%s: Acquire() = %v", step, err)
		}
		return d
	}
	acquire("decide single", &cascade.Plan{Debits: []cascade.Debit{debit("solo", "rpm:10/min", 1, cascade.Consume)}})
	acquire("decide multi", &cascade.Plan{Debits: []cascade.Debit{debit("m1", "rpm:10/min", 1, cascade.Consume), debit("m2", "rpm:10/min", 1, cascade.Consume)}})
	rec.Step("Ancestors")
	anc, err := st.Ancestors(ctx, key("key-1"), 4)
	if err != nil || len(anc) == 0 {
		t.Fatalf("Ancestors(key-1) = %v, %v; want acme", anc, err)
	}
	cas := &cascade.Plan{Debits: []cascade.Debit{debit("key-1", "rpm:10/min", 1, cascade.Consume)}}
	for i, a := range anc {
		for _, nl := range a.Limits {
			cas.Debits = append(cas.Debits, cascade.Debit{Key: a.Key, Limit: nl.Name, Bucket: nl.Bucket, Amount: tokenbucket.PerToken, Depth: uint8(i + 1)})
		}
	}
	acquire("decide cascading", cas)
	acquire("decide refusal", &cascade.Plan{Debits: []cascade.Debit{debit("small", "rpm:1/min", 5, cascade.Consume)}})
	acquire("decide small", &cascade.Plan{Debits: []cascade.Debit{debit("small2", "rpm:1/min", 1, cascade.Consume)}})
	acquire("decide give-back", &cascade.Plan{Debits: []cascade.Debit{debit("plenty", "rpm:100/min", 1, cascade.Consume), debit("small2", "rpm:1/min", 1, cascade.Consume)}})
	acquire("decide charge", &cascade.Plan{Debits: []cascade.Debit{debit("usage", "tpm:100/min", 30, cascade.Charge)}})
	acquire("decide refund", &cascade.Plan{Debits: []cascade.Debit{debit("usage", "tpm:100/min", 10, cascade.Refund)}})
	acquire("decide check", &cascade.Plan{Debits: []cascade.Debit{debit("usage", "tpm:100/min", 0, cascade.Check)}})
	// A hot item: its first writes are throttled, and the store doubles its
	// shards in a transaction.
	hot := cascade.Plan{Debits: []cascade.Debit{debit("hot", "rpm:1000/min", 1, cascade.Consume)}}
	acquire("decide hot", &hot)
	var throttled atomic.Int64
	hotPK := regexp.MustCompile("^n" + nsA + "/BUCKET#hot#")
	rec.SetThrottle(func(pk string) bool { return hotPK.MatchString(pk) && throttled.Add(1) <= 3 })
	for i := 0; i < 20 && obs.n.Load() == 0; i++ {
		acquire("decide hot (throttled)", &hot)
	}
	rec.SetThrottle(nil)
	if obs.n.Load() == 0 {
		t.Fatal("throttled writes of the hot item did not double its shards")
	}
	// A settlement: a transaction of its marker's Put and its buckets'
	// updates; then the same ID again (the marker's condition fails).
	settle := &cascade.Settlement{ID: "lease-1", Expires: time.Now().Add(time.Hour), Debits: []cascade.Debit{
		debit("usage", "tpm:100/min", 5, cascade.Charge), debit("solo", "rpm:10/min", 1, cascade.Refund),
	}}
	for _, step := range []string{"settle", "settle duplicate"} {
		rec.Step(step)
		if _, err := st.Settle(ctx, settle); err != nil {
			t.Fatalf("%s: Settle() = %v", step, err)
		}
	}
	rec.Step("Status")
	if _, err := dadmin.New(st).Status(ctx, key("solo"), map[string]tokenbucket.Limit{"rpm": lim("rpm:10/min")}); err != nil {
		t.Fatalf("Status() = %v", err)
	}
	rc.decide = rec.Take()

	// aggregator: the stream poller over the records the decisions above
	// wrote, applying their usage.
	rec.Step("aggregator")
	arn, err := usage.Of(st).StreamARN(ctx)
	if err != nil {
		t.Fatalf("StreamARN() = %v", err)
	}
	// The poller's calls name their origin: one cut short when its
	// context ended can reach the recorder after the next step began.
	aggClient, err := dynamo.NewClient(ctx, rec.Endpoint(), "us-east-1", func(o *dynamodb.Options) {
		o.HTTPClient = originClient{HTTPClient: o.HTTPClient, name: "aggregator"}
	})
	if err != nil {
		t.Fatal(err)
	}
	aggStore, err := dynamo.NewStore(ctx, aggClient, dynamo.Config{Table: table, Namespace: nsA, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("NewStore(aggregator) = %v", err)
	}
	defer aggStore.Close()
	poll, stop := context.WithTimeout(ctx, 3*time.Second)
	agg := usage.NewAggregator(usage.Of(aggStore))
	_ = streampoll.New(usage.NewStreamsClient(aggClient), usage.Of(aggStore), agg, streampoll.Config{StreamARN: arn, Idle: 50 * time.Millisecond}).Run(poll)
	stop()
	rc.aggregator = rec.Take()

	// admin, on what the decisions and the aggregator wrote: the
	// operator's commands of the namespace (a sharded bucket, a chain, the
	// audit records and usage snapshots they read), then the namespace
	// lifecycle, on the whole table, purge last.
	run("bucket", "show", "-entity", "hot", "-resource", "r")
	run("bucket", "show", "-entity", "key-1", "-resource", "r")
	run("bucket", "reset", "-entity", "hot", "-resource", "r")
	run("bucket", "reset", "-entity", "key-1", "-resource", "r", "-chain")
	run("audit", "list", "-entity", "hot")
	run("audit", "list", "-system")
	run("usage", "list", "-entity", "usage")
	run("usage", "summary", "-entity", "usage", "-window", "monthly")
	ops := rec.Take()
	rc.adminScoped = append(rc.adminScoped, ops...)
	rc.admin = append(rc.admin, ops...)
	run("namespace", "show", nsA)
	run("namespace", "delete", nsA)
	run("namespace", "recover", nsA)
	run("namespace", "orphans")
	run("usage", "top", "-resource", "r") // a Scan of the whole table
	run("namespace", "delete", nsA)
	run("namespace", "purge", nsA, "-yes")
	rc.admin = append(rc.admin, rec.Take()...)
	// A poller call that arrived late belongs to the aggregator.
	rc.adminScoped = slices.DeleteFunc(rc.adminScoped, func(c call) bool { return c.Step == "aggregator" })
	rc.admin = slices.DeleteFunc(rc.admin, func(c call) bool {
		if c.Step == "aggregator" {
			rc.aggregator = append(rc.aggregator, c)
			return true
		}
		return false
	})
	var transact bool
	for _, c := range rc.decide {
		transact = transact || c.Step == "decide hot (throttled)" && c.Action == "dynamodb:UpdateItem" && strings.HasSuffix(c.Keys[0], "#hot#r#1")
	}
	if !transact {
		t.Error("no write of shard 1 of the hot item was recorded")
	}

	for _, c := range append(append(append(slices.Clone(rc.tableAdmin), rc.admin...), rc.readOnly...), rc.decide...) {
		if c.Table != table {
			t.Errorf("%s: %s named table %q, want %q", c.Step, c.Action, c.Table, table)
		}
	}
	src := readTemplate(t)
	for _, err := range checkAll(t, src, rc, nsA) {
		t.Error(err)
	}
	if t.Failed() {
		logCalls(t, rc)
		return
	}

	// Each action removed from the template in turn must fail the check.
	mutants := 0
	for _, m := range removals(src) {
		mutants++
		if errs := checkAll(t, m.src, rc, nsA); len(errs) == 0 {
			t.Errorf("the template without %s in %s passes the check", m.action, m.policy)
		}
	}
	if mutants < 20 {
		t.Errorf("%d mutated copies, want one per action of every policy (at least 20)", mutants)
	}
	t.Logf("%d mutated copies, each failing", mutants)
}

func logCalls(t *testing.T, rc roleCalls) {
	for role, calls := range map[string][]call{"decide": rc.decide, "admin": rc.admin, "table-admin": rc.tableAdmin, "read-only": rc.readOnly, "aggregator": rc.aggregator} {
		seen := map[string]bool{}
		for _, c := range calls {
			s := c.Action + " " + c.Index + " " + c.Step
			if !seen[s] {
				seen[s] = true
				t.Logf("%s: %s", role, s)
			}
		}
	}
}

// mutant is the template with one action removed from one policy.
type mutant struct {
	policy, action string
	src            []byte
}

var flowList = regexp.MustCompile(`Action: \[([^\]]*)\]`)

// removals returns a copy of src per action of each managed policy, with
// that action removed from the policy's Action lists.
func removals(src []byte) []mutant {
	lines := strings.Split(string(src), "\n")
	var out []mutant
	for i, line := range lines {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") || !strings.HasSuffix(line, "Policy:") {
			continue
		}
		name := strings.TrimSuffix(strings.TrimSpace(line), ":")
		end := i + 1
		for end < len(lines) && (lines[end] == "" || strings.HasPrefix(lines[end], "   ") || strings.HasPrefix(lines[end], "  #")) {
			end++
		}
		actions := map[string]bool{}
		for _, l := range lines[i:end] {
			if m := flowList.FindStringSubmatch(l); m != nil {
				for _, a := range strings.Split(m[1], ",") {
					actions[strings.TrimSpace(a)] = true
				}
			}
		}
		for a := range actions {
			cp := slices.Clone(lines)
			for j := i; j < end; j++ {
				cp[j] = flowList.ReplaceAllStringFunc(cp[j], func(s string) string {
					m := flowList.FindStringSubmatch(s)
					var keep []string
					for _, x := range strings.Split(m[1], ",") {
						if strings.TrimSpace(x) != a {
							keep = append(keep, strings.TrimSpace(x))
						}
					}
					return "Action: [" + strings.Join(keep, ", ") + "]"
				})
			}
			out = append(out, mutant{policy: name, action: a, src: []byte(strings.Join(cp, "\n"))})
		}
	}
	return out
}
