package admin_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

func run(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := admin.Run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
	return out.String(), err
}

func TestAdminAgainstLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	env := map[string]string{"DYNAMODB_TABLE": dynamotest.TableName(t), "DYNAMODB_ENDPOINT": l.Endpoint(), "NAMESPACE": "acme"}
	steps := []struct {
		args []string
		want string // substring of stdout
	}{
		{[]string{"table", "create"}, "is ready"},
		{[]string{"table", "create"}, "is ready"}, // idempotent
		{[]string{"namespace", "register", "acme"}, "namespace acme id "},
		{[]string{"namespace", "list"}, "acme\t"},
		{[]string{"limits", "set", "-system", "rpm:600/min"}, "system: set rpm:600/min"},
		{[]string{"limits", "set", "-resource", "gpt-4", "tpm:50000/min:80000"}, "set tpm:50000/min:80000"},
		{[]string{"limits", "set", "-entity", "team#1/x", "-resource", "gpt-4", "rpm:10/sec", "tpd:1000000/day"}, "set rpm:10/sec tpd:1000000/day"},
		{[]string{"limits", "get", "-entity", "team#1/x", "-resource", "gpt-4"}, "rpm:10/sec tpd:1000000/day"},
		{[]string{"limits", "delete", "-entity", "team#1/x", "-resource", "gpt-4", "tpd"}, "deleted tpd"},
		{[]string{"limits", "get", "-entity", "team#1/x", "-resource", "gpt-4"}, "rpm:10/sec"},
		{[]string{"entity", "create", "tenant"}, `entity "tenant" parent "" cascade false`},
		{[]string{"entity", "create", "key-1", "-parent", "tenant", "-cascade"}, `entity "key-1" parent "tenant" cascade true`},
		{[]string{"entity", "show", "tenant"}, `child "key-1"`},
		{[]string{"entity", "show", "key-1"}, `parent "tenant" cascade true`},
		// Deleting what is not stored says so and succeeds.
		{[]string{"limits", "delete", "-resource", "never-set"}, `resource "never-set": no limits stored, nothing to delete`},
		{[]string{"limits", "delete", "-entity", "team#1/x", "-resource", "gpt-4", "tpd"}, `no limit named tpd stored, nothing to delete`},
		{[]string{"limits", "set", "-resource", "r", "a:1", "b:2"}, "set a:1/sec b:2/sec"},
		{[]string{"limits", "delete", "-resource", "r", "a", "zz"}, "deleted a\nresource \"r\": no limit named zz was stored"},
		// The aliases the README used.
		{[]string{"limits", "get", "-resource", "r", "-table", env["DYNAMODB_TABLE"], "-region", "us-east-1", "-endpoint", l.Endpoint()}, "b:2/sec"},
	}
	for _, st := range steps {
		out, err := run(t, env, st.args...)
		if err != nil {
			t.Fatalf("Run(%q) error = %v", st.args, err)
		}
		if !strings.Contains(out, st.want) {
			t.Fatalf("Run(%q) = %q, want it to contain %q", st.args, out, st.want)
		}
	}
	out, err := run(t, env, "limits", "get", "-entity", "team#1/x", "-resource", "gpt-4")
	if err != nil || strings.Contains(out, "tpd") {
		t.Errorf("Run(limits get) = %q, %v, want tpd deleted", out, err)
	}

	// A missing table says which, where, and what to do.
	_, err = run(t, env, "namespace", "list", "-dynamodb_table", "nosuch")
	want := "table nosuch does not exist in us-east-1 at " + l.Endpoint() + ": create it with 'ratelimit table create', or check DYNAMODB_TABLE"
	if err == nil || err.Error() != want || !errors.Is(err, dynamo.ErrNoTable) {
		t.Errorf("Run(namespace list) on a missing table = %v, want %q wrapping ErrNoTable", err, want)
	}
	_, err = run(t, env, "entity", "show", "nobody")
	if want := `entity "nobody" does not exist in namespace acme`; err == nil || err.Error() != want || !errors.Is(err, dynamo.ErrNotFound) {
		t.Errorf("Run(entity show nobody) = %v, want %q", err, want)
	}
	_, err = run(t, env, "limits", "get", "-resource", "never-set")
	if want := `resource "never-set": no limits stored in namespace acme`; err == nil || err.Error() != want {
		t.Errorf("Run(limits get never-set) = %v, want %q", err, want)
	}

	// Every config change left an audit record.
	client := l.Client(t)
	s, err := dynamo.NewStore(context.Background(), client, dynamo.Config{Table: env["DYNAMODB_TABLE"], Namespace: "acme"})
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	recs, err := dadmin.New(s).Audit(context.Background(), dadmin.Scope{Entity: "team#1/x"})
	if err != nil || len(recs) != 2 || recs[0].Action != "limits.set" || recs[1].Action != "limits.delete" { // the delete of nothing wrote none
		t.Errorf("Audit(team#1/x) = %+v, %v, want limits.set then limits.delete", recs, err)
	}
	if recs, err := dadmin.New(s).Audit(context.Background(), dadmin.Scope{System: true}); err != nil || len(recs) < 2 {
		t.Errorf("Audit(system) = %+v, %v, want the namespace registration and the system limits", recs, err)
	}
}

func TestAdminUsageErrors(t *testing.T) {
	env := map[string]string{"DYNAMODB_TABLE": "t", "DYNAMODB_ENDPOINT": "http://127.0.0.1:1"}
	cases := []struct {
		name string
		args []string
	}{
		{"no command", nil},
		{"unknown verb", []string{"table", "drop"}},
		{"entity without id", []string{"entity", "show"}},
		{"no scope", []string{"limits", "get"}},
		{"system with entity", []string{"limits", "get", "-system", "-entity", "e"}},
		{"bad spec", []string{"limits", "set", "-system", "rpm:ten/min"}},
		{"bad unit", []string{"limits", "set", "-system", "rpm:10/week"}},
		{"bad flag", []string{"limits", "get", "-nope"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Usage errors come before any DynamoDB call (the endpoint is a
			// closed port).
			_, err := run(t, env, c.args...)
			var ue *admin.UsageError
			if !errors.Is(err, admin.ErrUsage) || !errors.As(err, &ue) {
				t.Fatalf("Run(%q) = %v, want a *UsageError wrapping ErrUsage", c.args, err)
			}
			if want := strings.Join(c.args[:min(2, len(c.args))], " "); c.name != "no command" && c.name != "unknown verb" && ue.Command != want {
				t.Errorf("Run(%q) names command %q, want %q", c.args, ue.Command, want)
			}
		})
	}
}

// TestAdminDefaultsAreServes: with no setting, the admin commands use the
// table, region and namespace serve uses (the DynamoDB call then fails on
// the closed port, after the usage checks passed).
func TestAdminDefaultsAreServes(t *testing.T) {
	_, err := run(t, map[string]string{"DYNAMODB_ENDPOINT": "http://127.0.0.1:1", "BACKEND_TIMEOUT": "50ms"}, "namespace", "list")
	if err == nil || errors.Is(err, admin.ErrUsage) || !strings.Contains(err.Error(), "get dynalimit") {
		t.Errorf("Run(namespace list) with no settings = %v, want a DynamoDB error on table dynalimit", err)
	}
}

// TestEntityChainAgainstLocal: entity show prints the chain above an
// entity with each level's cascade flag and stored limits, and entity
// create refuses a cycle, a chain too deep and an id no request names.
func TestEntityChainAgainstLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	env := map[string]string{"DYNAMODB_TABLE": dynamotest.TableName(t), "DYNAMODB_ENDPOINT": l.Endpoint()}
	for _, args := range [][]string{
		{"table", "create"},
		{"entity", "create", "acme", "-cascade"},
		{"limits", "set", "-entity", "acme", "rpm:1000/min"},
		{"entity", "create", "proj", "-parent", "acme", "-cascade"},
		{"limits", "set", "-entity", "proj", "-resource", "gpt-4", "rpm:100/min"},
		{"entity", "create", "key-1", "-parent", "proj"},
		{"entity", "create", "orphan", "-parent", "ghost"},
	} {
		if out, err := run(t, env, args...); err != nil {
			t.Fatalf("Run(%q) = %q, %v", args, out, err)
		}
	}
	shows := []struct {
		args []string
		want string
	}{
		{[]string{"entity", "show", "key-1", "-resource", "gpt-4"}, `entity "key-1" parent "proj" cascade false
chain "key-1" -> "proj" -> "acme"
level "key-1" cascade false: no limits stored
level "proj" cascade true resource "gpt-4": rpm:100/min
bucket "proj" resource "gpt-4": rpm 100 of 100 left
level "acme" cascade true default: rpm:1000/min
bucket "acme" resource "gpt-4": rpm 1000 of 1000 left
`},
		{[]string{"entity", "show", "key-1"}, `entity "key-1" parent "proj" cascade false
chain "key-1" -> "proj" -> "acme"
level "key-1" cascade false: no limits stored
level "proj" cascade true: no limits stored
level "acme" cascade true default: rpm:1000/min
`},
		{[]string{"entity", "show", "acme", "-resource", "gpt-4"}, `entity "acme" parent "" cascade true
child "proj"
chain "acme"
level "acme" cascade true default: rpm:1000/min
bucket "acme" resource "gpt-4": rpm 1000 of 1000 left
`},
		{[]string{"entity", "show", "orphan"}, `entity "orphan" parent "ghost" cascade false
chain "orphan" -> "ghost"
level "orphan" cascade false: no limits stored
level "ghost": no entity record
`},
	}
	for _, s := range shows {
		if out, err := run(t, env, s.args...); err != nil || out != s.want {
			t.Errorf("Run(%q) = %q, %v, want\n%s", s.args, out, err, s.want)
		}
	}
	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"entity", "create", "acme", "-parent", "key-1"}, `would make a cycle (acme -> key-1 -> proj -> acme)`},
		{[]string{"entity", "create", "org/team"}, `use "org%2Fteam"`},
		{[]string{"entity", "create", "k", "-parent", "a#b"}, `use "a%23b"`},
	}
	for _, r := range refusals {
		_, err := run(t, env, r.args...)
		if err == nil || errors.Is(err, admin.ErrUsage) || !strings.Contains(err.Error(), r.want) {
			t.Errorf("Run(%q) = %v, want a failure (not a usage error) saying %q", r.args, err, r.want)
		}
	}
}
