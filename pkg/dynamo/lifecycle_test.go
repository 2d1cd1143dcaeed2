package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// itemsUnder returns the keys of the fake's items whose partition key
// begins with prefix.
func itemsUnder(f *dynamotest.Fake, prefix string) []string {
	var out []string
	for _, it := range f.Items("t") {
		pk := it["PK"].(*types.AttributeValueMemberS).Value
		if strings.HasPrefix(pk, prefix) {
			out = append(out, pk+" "+it["SK"].(*types.AttributeValueMemberS).Value)
		}
	}
	return out
}

// TestNamespaceLifecycle: delete marks a registered namespace deleted and
// recover undoes it (each once, audited with the principal); purge refuses
// an active namespace, deletes every item of a deleted one in pages of
// batch deletes, leaves the other namespace's items as they were, and
// marks it purged; orphans lists a namespace with items and no record,
// with its item count, until it is purged.
func TestNamespaceLifecycle(t *testing.T) {
	ctx := context.Background()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(ctx, f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	c := newClock()
	s := newStore(t, f, "t", c, dynamo.WithPrincipal("ops@example"))
	lim := mustLimit(t, 10, time.Minute, 0)
	fill := func(ns string, n int) {
		t.Helper()
		for i := range n {
			key := cascade.Key{Namespace: ns, Entity: fmt.Sprintf("e%d", i), Resource: "r"}
			p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
			if _, err := s.Acquire(ctx, p); err != nil {
				t.Fatalf("Acquire(%v) = %v", key, err)
			}
		}
		if err := admin.New(s).SetLimits(ctx, admin.Scope{Namespace: ns, Entity: "e0"}, map[string]tokenbucket.Limit{"rpm": lim}); err != nil {
			t.Fatalf("SetLimits(%s) = %v", ns, err)
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.New(s).RegisterNamespace(ctx, ns); err != nil {
			t.Fatalf("RegisterNamespace(%s) = %v", ns, err)
		}
	}
	fill("team-a", 60) // more than two batches of 25
	fill("team-b", 7)
	fill("stray", 3) // never registered
	keepB := itemsUnder(f, "nteam-b/")

	if _, err := admin.New(s).PurgeNamespace(ctx, "team-a", nil); !errors.Is(err, admin.ErrNamespaceActive) {
		t.Fatalf("PurgeNamespace(active team-a) = %v, want ErrNamespaceActive", err)
	}
	for _, step := range []struct {
		name  string
		do    func(context.Context, string) (bool, error)
		moved bool
		state string
	}{
		{"delete", admin.New(s).DeleteNamespace, true, admin.NamespaceDeleted},
		{"delete again", admin.New(s).DeleteNamespace, false, admin.NamespaceDeleted},
		{"recover", admin.New(s).RecoverNamespace, true, admin.NamespaceActive},
		{"recover again", admin.New(s).RecoverNamespace, false, admin.NamespaceActive},
		{"delete before the purge", admin.New(s).DeleteNamespace, true, admin.NamespaceDeleted},
	} {
		moved, err := step.do(ctx, "team-a")
		got, gerr := admin.New(s).Namespace(ctx, "team-a")
		if err != nil || moved != step.moved || gerr != nil || got.State != step.state {
			t.Fatalf("%s: = %t, %v; state %q (%v), want %t and %q", step.name, moved, err, got.State, gerr, step.moved, step.state)
		}
	}
	if _, err := admin.New(s).DeleteNamespace(ctx, "nowhere"); !errors.Is(err, dynamo.ErrNotFound) {
		t.Errorf("DeleteNamespace(unregistered) = %v, want ErrNotFound", err)
	}

	orphans, err := admin.New(s).Orphans(ctx)
	if err != nil || len(orphans) != 1 || orphans[0].Name != "stray" || orphans[0].Items != 5 {
		t.Fatalf("Orphans() = %+v, %v, want stray with 5 items (3 buckets, its stored limits and their audit record)", orphans, err)
	}

	var progress []int
	n, err := admin.New(s).PurgeNamespace(ctx, "team-a", func(d int) { progress = append(progress, d) })
	if err != nil || n < 61 || len(progress) < 3 || progress[len(progress)-1] != n {
		t.Fatalf("PurgeNamespace(team-a) = %d, %v (progress %v), want at least 61 items (60 buckets, limits, audit) in 3 or more batches", n, err, progress)
	}
	if left := itemsUnder(f, "nteam-a/"); len(left) != 1 || !strings.Contains(left[0], "AUDIT") {
		t.Errorf("items under nteam-a/ after the purge = %v, want only the purge's audit record", left)
	}
	if got := itemsUnder(f, "nteam-b/"); strings.Join(got, "\n") != strings.Join(keepB, "\n") {
		t.Errorf("items under nteam-b/ after purging team-a = %d, want the %d there before, untouched", len(got), len(keepB))
	}
	recs, err := admin.New(s).Audit(ctx, admin.Scope{Namespace: "team-a", System: true})
	if err != nil || len(recs) != 1 || recs[0].Action != "namespace.purge" || recs[0].Principal != "ops@example" || !strings.Contains(recs[0].After, fmt.Sprintf("deleted %d items", n)) {
		t.Errorf("Audit(team-a system) = %+v, %v, want the purge by ops@example", recs, err)
	}
	if got, _ := admin.New(s).Namespace(ctx, "team-a"); got.State != admin.NamespacePurged {
		t.Errorf("team-a after the purge: state %q, want purged", got.State)
	}

	if n, err := admin.New(s).PurgeNamespace(ctx, "stray", nil); err != nil || n != 5 {
		t.Errorf("PurgeNamespace(orphan stray) = %d, %v, want 5", n, err)
	}
	if orphans, err := admin.New(s).Orphans(ctx); err != nil || len(orphans) != 0 {
		t.Errorf("Orphans() after purging stray = %+v, %v, want none (stray is registered, purged)", orphans, err)
	}
}

// TestDeletedNamespaces: Refresh reads the registry records of the names
// asked ("" the deployment's) and holds those deleted or purged; a
// recovered namespace leaves the set; unregistered names are never in it;
// a failed read keeps the set read last.
func TestDeletedNamespaces(t *testing.T) {
	ctx := context.Background()
	f := dynamotest.NewFake()
	if err := admin.CreateTable(ctx, f, "t"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	s := newStore(t, f, "t", newClock())
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.New(s).RegisterNamespace(ctx, ns); err != nil {
			t.Fatalf("RegisterNamespace(%s) = %v", ns, err)
		}
	}
	d := admin.NewDeletedNamespaces("team-b")
	names := []string{"", "team-a", "nowhere"}
	check := func(step string, wantA, wantDeployment bool) {
		t.Helper()
		if err := d.Refresh(ctx, admin.New(s), names); err != nil {
			t.Fatalf("%s: Refresh() = %v", step, err)
		}
		if d.Deleted("team-a") != wantA || d.Deleted("") != wantDeployment || d.Deleted("team-b") != wantDeployment || d.Deleted("nowhere") {
			t.Errorf("%s: Deleted(team-a, \"\", team-b, nowhere) = %t %t %t %t, want %t %t %t false (set %v)", step,
				d.Deleted("team-a"), d.Deleted(""), d.Deleted("team-b"), d.Deleted("nowhere"), wantA, wantDeployment, wantDeployment, d.Names())
		}
	}
	check("all active", false, false)
	if _, err := admin.New(s).DeleteNamespace(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	check("team-a deleted", true, false)
	if _, err := admin.New(s).DeleteNamespace(ctx, "team-b"); err != nil {
		t.Fatal(err)
	}
	check("the deployment's deleted", true, true)
	if _, err := admin.New(s).RecoverNamespace(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	check("team-a recovered", false, true)
	f.SetFail(func(context.Context, string) error { return errors.New("down") })
	if err := d.Refresh(ctx, admin.New(s), names); err == nil || !d.Deleted("") || d.Deleted("team-a") {
		t.Errorf("Refresh() on a failing table = %v, set %v; want an error and the set read last", err, d.Names())
	}
}
