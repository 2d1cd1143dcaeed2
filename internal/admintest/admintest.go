package admintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Store is one store under the suite.
type Store struct {
	// Stores is the store as the operator's commands see it.
	Stores admin.Stores
	// Implements declares the jobs the store keeps: Stores must keep
	// exactly these, and every verb of the others must answer
	// admin.ErrUnsupported.
	Implements []admin.Job
	// Acquire decides on the store's buckets as the service does: the
	// suite drains buckets with it. Required with admin.JobBuckets.
	Acquire func(ctx context.Context, p *cascade.Plan) (cascade.Decision, error)
	// AddUsage records that entity consumed millitokens of limit of
	// resource at at, as the store's usage history learns it (DynamoDB:
	// its aggregator). Required with admin.JobUsage.
	AddUsage func(ctx context.Context, ns, entity, resource, limit string, at time.Time, millitokens int64) error
}

// Factory returns the store a scenario runs on. Its data must not be seen
// by other scenarios: a fresh store, or a shared one whose keys the
// scenario keeps in namespace ns (and namespaces named ns + "-…"), which
// is also the store's NAMESPACE. It may register cleanups with t.
type Factory func(t *testing.T, ns string) Store

// Principal is who the suite's command lines name ($USER): the audit
// records of their writes name it.
const Principal = "suite-operator"

// namespaces numbers the scenarios' namespaces within the test binary.
var namespaces atomic.Int64

// Run runs every scenario on stores made by f: those of the jobs the
// store declares, and for each other job the check that its verbs answer
// admin.ErrUnsupported naming the store.
func Run(t *testing.T, f Factory) {
	t.Helper()
	scenarios := []struct {
		job  admin.Job
		name string // the subtest's; the job's when empty
		run  func(t *testing.T, r *runner)
	}{
		{admin.JobBuckets, "", testBuckets},
		{admin.JobEntities, "", testEntities},
		{admin.JobAudit, "", testAudit},
		{admin.JobNamespaces, "", testNamespaces},
		{admin.JobUsage, "", testUsage},
		{admin.JobUsage, "usage_top", testUsageTop},
	}
	t.Run("declared", func(t *testing.T) { testDeclared(t, f) })
	for _, sc := range scenarios {
		name := sc.name
		if name == "" {
			name = jobName(sc.job)
		}
		t.Run(name, func(t *testing.T) {
			r := newRunner(t, f)
			if !slices.Contains(r.st.Implements, sc.job) {
				testUnsupported(t, r, sc.job)
				return
			}
			sc.run(t, r)
		})
	}
}

// jobName is a job as a subtest's name.
func jobName(j admin.Job) string {
	return map[admin.Job]string{admin.JobBuckets: "buckets", admin.JobEntities: "entities", admin.JobAudit: "audit", admin.JobNamespaces: "namespaces", admin.JobUsage: "usage"}[j]
}

// runner runs command lines on one scenario's store.
type runner struct {
	t   *testing.T
	st  Store
	ns  string
	ctx context.Context
}

func newRunner(t *testing.T, f Factory) *runner {
	ns := fmt.Sprintf("suite%d", namespaces.Add(1))
	st := f(t, ns)
	return &runner{t: t, st: st, ns: ns, ctx: t.Context()}
}

// run runs one command line; it returns its stdout, and its stderr
// appended after a line "--stderr--" when there is any.
func (r *runner) run(args ...string) (string, error) {
	env := map[string]string{"NAMESPACE": r.ns, "USER": Principal}
	var out, errOut bytes.Buffer
	err := admin.RunOn(r.ctx, r.st.Stores, args, func(k string) string { return env[k] }, &out, &errOut)
	if errOut.Len() > 0 {
		out.WriteString("--stderr--\n" + errOut.String())
	}
	return out.String(), err
}

// ok runs a command line that must succeed and contain each of want.
func (r *runner) ok(args []string, want ...string) string {
	r.t.Helper()
	out, err := r.run(args...)
	if err != nil {
		r.t.Fatalf("%s: error %v, want none (output %q)", strings.Join(args, " "), err, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			r.t.Errorf("%s = %q, want it to contain %q", strings.Join(args, " "), out, w)
		}
	}
	return out
}

// fails runs a command line that must fail with an error wrapping target
// and containing each of want.
func (r *runner) fails(args []string, target error, want ...string) {
	r.t.Helper()
	out, err := r.run(args...)
	if err == nil || !errors.Is(target, errAny) && !errors.Is(err, target) {
		r.t.Errorf("%s = %q, %v, want an error wrapping %q", strings.Join(args, " "), out, err, target)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			r.t.Errorf("%s error = %q, want it to contain %q", strings.Join(args, " "), err, w)
		}
	}
}

// errAny, as fails' target, takes any error.
var errAny = errors.New("any error")

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// testDeclared checks that the store keeps exactly the jobs it declares,
// with the hooks they need.
func testDeclared(t *testing.T, f Factory) {
	st := f(t, fmt.Sprintf("suite%d", namespaces.Add(1)))
	if st.Stores.Name == "" {
		t.Errorf("Stores.Name is empty: the error of a verb the store does not support names it")
	}
	for _, j := range admin.Jobs {
		if declared := slices.Contains(st.Implements, j); declared != st.Stores.Has(j) {
			t.Errorf("job %s: declared %t, but Stores keeps it: %t", j, declared, st.Stores.Has(j))
		}
	}
	if st.Stores.Has(admin.JobBuckets) && st.Acquire == nil {
		t.Errorf("the store keeps buckets but gives no Acquire to drain them")
	}
	if st.Stores.Has(admin.JobUsage) && st.AddUsage == nil {
		t.Errorf("the store keeps usage but gives no AddUsage to record it")
	}
}

// verbsOf are command lines of every verb of each job, valid but for the
// store.
var verbsOf = map[admin.Job][][]string{
	admin.JobBuckets: {
		{"bucket", "show", "-entity", "e", "-resource", "r"},
		{"bucket", "reset", "-entity", "e", "-resource", "r"},
		{"bucket", "topup", "-entity", "e", "-resource", "r", "-limit", "rpm", "-amount", "1"},
	},
	admin.JobEntities: {
		{"limits", "set", "-entity", "e", "rpm:1/min"},
		{"limits", "get", "-entity", "e"},
		{"limits", "delete", "-entity", "e"},
		{"entity", "create", "e"},
		{"entity", "show", "e"},
	},
	admin.JobAudit: {{"audit", "list", "-system"}},
	admin.JobNamespaces: {
		{"namespace", "register", "n"}, {"namespace", "list"}, {"namespace", "show", "n"},
		{"namespace", "delete", "n"}, {"namespace", "recover", "n"}, {"namespace", "orphans"},
		{"namespace", "purge", "n", "-yes"},
	},
	admin.JobUsage: {{"usage", "list", "-entity", "e"}, {"usage", "summary", "-entity", "e"}, {"usage", "top", "-resource", "r"}},
}

// testUnsupported checks that every verb of job j answers the one error
// of a verb the store does not support: ErrUnsupported, naming the store
// and what it does not keep.
func testUnsupported(t *testing.T, r *runner, j admin.Job) {
	for _, args := range verbsOf[j] {
		r.fails(args, admin.ErrUnsupported, strings.Join(args[:2], " ")+": ", r.st.Stores.Name, "does not keep "+j.String())
	}
}
