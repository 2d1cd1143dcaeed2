package admintest_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/admintest"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// brokenEnv, set, makes TestSuiteCatchesBrokenStores run the suite on
// the broken stores (in the child process it starts).
const brokenEnv = "ADMINTEST_BROKEN_STORES"

// noReset is a store whose reset says it refilled the bucket and does not.
type noReset struct{ admin.Buckets }

func (n noReset) ResetBucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (admin.BucketState, bool, error) {
	b, err := n.Bucket(ctx, key, limits)
	return b, len(b.Total()) > 0, err
}

// broken are stores each wrong one way, and the subtests of the suite
// that must fail on it.
var broken = []struct {
	name string
	mend func(st *admintest.Store)
	fail []string
}{
	{"undeclared buckets", func(st *admintest.Store) { st.Implements = nil }, []string{"declared", "buckets"}},
	{"declared, not kept", func(st *admintest.Store) { st.Implements = append(st.Implements, admin.JobAudit) }, []string{"declared", "audit"}},
	{"a reset that refills nothing", func(st *admintest.Store) { st.Stores.Buckets = noReset{st.Stores.Buckets} }, []string{"buckets"}},
	{"no name", func(st *admintest.Store) { st.Stores.Name = "" }, []string{"declared"}},
}

// TestSuiteCatchesBrokenStores runs the suite, in a child process of this
// test binary (a subtest that fails fails the test), on embedded stores
// broken one way each, and checks that the subtests that must fail do.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		for _, b := range broken {
			t.Run(b.name, func(t *testing.T) {
				admintest.Run(t, func(t *testing.T, ns string) admintest.Store {
					st := memstore.New(memstore.WithNamespace(ns))
					log, _ := test.NewNullLogger()
					s := admintest.Store{Stores: admin.Embedded(st, ns, logrus.NewEntry(log)), Implements: []admin.Job{admin.JobBuckets}, Acquire: st.Acquire}
					b.mend(&s)
					return s
				})
			})
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesBrokenStores$", "-test.v", "-test.short", "-test.count=1")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed every broken store:\n%s", out)
	}
	for _, b := range broken {
		name := strings.ReplaceAll(b.name, " ", "_")
		for _, sub := range []string{"declared", "buckets", "entities", "audit", "namespaces", "usage"} {
			failed := strings.Contains(string(out), "--- FAIL: TestSuiteCatchesBrokenStores/"+name+"/"+sub+" ")
			if want := slices.Contains(b.fail, sub); failed != want {
				t.Errorf("%s: subtest %s failed = %t, want %t", b.name, sub, failed, want)
			}
		}
	}
	if t.Failed() {
		t.Logf("the suite on the broken stores:\n%s", out)
	}
}
