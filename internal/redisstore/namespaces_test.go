package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// keysByNamespace lists the keys of masters, by the namespace each is in
// ("" for a key of no namespace).
func keysByNamespace(t *testing.T, masters ...*redistest.Server) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, m := range masters {
		keys, _ := m.MustDo("KEYS", "*").([]any)
		for _, k := range keys {
			key := fmt.Sprint(k)
			ns, _ := redisstore.NamespaceOfKey(key)
			out[ns] = append(out[ns], key)
		}
	}
	for _, ks := range out {
		slices.Sort(ks)
	}
	return out
}

// fill writes keys in namespace ns through st: buckets of several
// entities (several slots on a cluster), a stored limit and an audit
// record.
func fill(t *testing.T, st *redisstore.Store, ns string) {
	t.Helper()
	ctx := context.Background()
	l, _ := tokenbucket.Rate(10, time.Minute, 0)
	for i := range 5 {
		d := cascade.Debit{Key: cascade.Key{Namespace: ns, Entity: fmt.Sprint("e", i), Resource: "r"}, Limit: "rpm", Bucket: l, Amount: tokenbucket.PerToken}
		if dec, err := st.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{d}}); err != nil || !dec.Admitted {
			t.Fatalf("Acquire in %q = %+v, %v", ns, dec, err)
		}
	}
	sc := redisstore.Scope{Namespace: ns, Entity: "e0"}
	if _, _, err := st.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"rpm": l}); err != nil {
		t.Fatal(err)
	}
	if err := st.Record(ctx, sc, redisstore.AuditRecord{Action: "limits.set"}); err != nil {
		t.Fatal(err)
	}
}

// TestNamespaces runs the registry and the lifecycle on one redis-server
// and on a cluster of three masters with a replica each (whose client
// reaches the replicas too: a SCAN of one would count its master's keys
// again), with namespaces whose names are
// prefixes of each other's and hold glob characters and braces: register
// (idempotent), delete and recover (each once), orphans (every namespace
// with keys and no record, counted), purge (refused while active; an
// orphan registered purged; no other namespace's key, nor a key of no
// namespace, touched), and the states the gate reads.
func TestNamespaces(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		c, srv := serverProc(t)
		testNamespaces(t, c, srv)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 1, redistest.Options{})
		// A client made once the topology lists the replicas (online once
		// synced: some seconds) reaches them.
		var c rueidis.Client
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var err error
			if c, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Seeds(), DisableCache: true}); err != nil {
				t.Fatal(err)
			}
			n := len(c.Nodes())
			if n == 6 {
				break
			}
			c.Close()
			if time.Now().After(end) {
				t.Fatalf("the cluster client reaches %d nodes, want the 3 masters and their 3 replicas", n)
			}
		}
		t.Cleanup(c.Close)
		testNamespaces(t, c, cl.Masters()...)
	})
}

func testNamespaces(t *testing.T, c rueidis.Client, masters ...*redistest.Server) {
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Config{Namespace: "dep", Timeout: time.Second})
	t.Cleanup(func() { _ = st.Close() })
	nss := st.Namespaces()
	// Unescaped, the patterns of te* and t?am would match tex's and
	// team's keys.
	names := []string{"team", "team2", "te*", "tex", "t?am", "t{x}", "t?[a]\\"}
	for _, ns := range names {
		fill(t, st, ns)
	}
	if err := c.Do(ctx, c.B().Set().Key("other:team").Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	before := keysByNamespace(t, masters...)

	reg, created, err := nss.Register(ctx, "team")
	if err != nil || !created || len(reg.ID) != 12 || reg.State != redisstore.NamespaceActive {
		t.Fatalf("Register(team) = %+v, %t, %v; want a new active record with an id of 12 hex digits", reg, created, err)
	}
	if again, created, err := nss.Register(ctx, "team"); err != nil || created || again.ID != reg.ID {
		t.Errorf("Register(team) again = %+v, %t, %v; want the same id, not created", again, created, err)
	}
	if _, err := nss.Purge(ctx, "team", nil); !errors.Is(err, redisstore.ErrNamespaceActive) {
		t.Errorf("Purge(team) while active = %v, want ErrNamespaceActive", err)
	}
	orphans, err := nss.Orphans(ctx)
	want := []redisstore.Orphan{}
	for _, ns := range slices.Sorted(slices.Values(names[1:])) {
		want = append(want, redisstore.Orphan{Name: ns, Items: len(before[ns])})
	}
	if err != nil || !slices.Equal(orphans, want) {
		t.Errorf("Orphans() = %+v, %v; want %+v", orphans, err, want)
	}

	for i, op := range []struct {
		name  string
		f     func(context.Context, string) (redisstore.Namespace, bool, error)
		moved bool
		state string
	}{
		{"delete", nss.Delete, true, redisstore.NamespaceDeleted}, {"delete", nss.Delete, false, redisstore.NamespaceDeleted},
		{"recover", nss.Recover, true, redisstore.NamespaceActive}, {"recover", nss.Recover, false, redisstore.NamespaceActive},
		{"delete", nss.Delete, true, redisstore.NamespaceDeleted},
	} {
		if _, moved, err := op.f(ctx, "team"); err != nil || moved != op.moved {
			t.Errorf("%d: %s(team) = %t, %v; want %t", i, op.name, moved, err, op.moved)
		}
		if got, err := nss.Get(ctx, "team"); err != nil || got.State != op.state || got.Changed.IsZero() {
			t.Errorf("%d: after %s: Get(team) = %+v, %v; want %s since now", i, op.name, got, err, op.state)
		}
	}
	if _, _, err := nss.Delete(ctx, "nobody"); !errors.Is(err, redisstore.ErrNotFound) {
		t.Errorf("Delete(nobody) = %v, want ErrNotFound", err)
	}

	purged := []string{"te*", "t?am", "team"}
	for _, ns := range purged {
		var told []int
		p, err := nss.Purge(ctx, ns, func(n int) { told = append(told, n) })
		if err != nil || p.Deleted != len(before[ns]) || len(told) == 0 || told[len(told)-1] != p.Deleted {
			t.Errorf("Purge(%q) = %+v, %v (told %v); want its %d keys deleted, and told", ns, p, err, told, len(before[ns]))
		}
		if got, err := nss.Get(ctx, ns); err != nil || got.State != redisstore.NamespacePurged {
			t.Errorf("Get(%q) after its purge = %+v, %v; want purged", ns, got, err)
		}
	}
	after := keysByNamespace(t, masters...)
	for ns, keys := range before {
		if slices.Contains(purged, ns) {
			if len(after[ns]) != 0 {
				t.Errorf("namespace %q after its purge holds %v", ns, after[ns])
			}
		} else if ns != "" && !slices.Equal(after[ns], keys) {
			t.Errorf("namespace %q after the purges holds %d keys, want its %d as they were", ns, len(after[ns]), len(keys))
		}
	}
	if !slices.Contains(after[""], redisstore.RegistryKey) || !slices.Contains(after[""], "other:team") {
		t.Errorf("keys of no namespace after the purges = %v, want the registry and other:team", after[""])
	}
	states, err := nss.NamespaceStates(ctx, []string{"team", "te*", "team2", "nobody"})
	if w := map[string]string{"team": "purged", "te*": "purged"}; err != nil || !maps.Equal(states, w) {
		t.Errorf("NamespaceStates() = %v, %v; want %v", states, err, w)
	}
	if _, moved, err := nss.Recover(ctx, "team"); err != nil || !moved {
		t.Errorf("Recover(team) after its purge = %t, %v; want recovered", moved, err)
	}
}

// TestSplitNamespaces: with REDIS_PERSECOND the registry is on the main
// Redis, and orphans and purge cover both.
func TestSplitNamespaces(t *testing.T) {
	mainC, mainSrv := serverProc(t)
	psC, psSrv := serverProc(t)
	sp := redisstore.NewSplit(
		redisstore.New(mainC, redisstore.Config{Timeout: time.Second}),
		redisstore.New(psC, redisstore.Config{Timeout: time.Second}),
	)
	t.Cleanup(func() { _ = sp.Close() })
	ctx := context.Background()
	perSec, _ := tokenbucket.Rate(2, time.Second, 0)
	perMin, _ := tokenbucket.Rate(10, time.Minute, 0)
	k := cascade.Key{Namespace: "gone", Entity: "e", Resource: "api"}
	if _, err := sp.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{
		{Key: k, Limit: "rps", Bucket: perSec, Amount: tokenbucket.PerToken},
		{Key: k, Limit: "rpm", Bucket: perMin, Amount: tokenbucket.PerToken},
	}}); err != nil {
		t.Fatal(err)
	}
	onMain, onPS := len(keysByNamespace(t, mainSrv)["gone"]), len(keysByNamespace(t, psSrv)["gone"])
	if onMain == 0 || onPS == 0 {
		t.Fatalf("keys of gone: %d on main, %d per second; want some on each", onMain, onPS)
	}
	nss := sp.Namespaces()
	if o, err := nss.Orphans(ctx); err != nil || len(o) != 1 || o[0].Items != onMain+onPS {
		t.Errorf("Orphans() = %+v, %v; want gone with %d keys", o, err, onMain+onPS)
	}
	if p, err := nss.Purge(ctx, "gone", nil); err != nil || p.Deleted != onMain+onPS || p.Was != "" || p.ID == "" {
		t.Errorf("Purge(gone) = %+v, %v; want its %d keys deleted, registered", p, err, onMain+onPS)
	}
	if left := len(keysByNamespace(t, mainSrv)["gone"]) + len(keysByNamespace(t, psSrv)["gone"]); left != 0 {
		t.Errorf("%d keys of gone left after its purge", left)
	}
	if keys := keysByNamespace(t, psSrv)[""]; len(keys) != 0 {
		t.Errorf("per-second Redis holds %v, want no registry: it is the main Redis's", keys)
	}
	if ns, err := nss.Get(ctx, "gone"); err != nil || ns.State != redisstore.NamespacePurged {
		t.Errorf("Get(gone) = %+v, %v; want purged", ns, err)
	}
}

// FuzzNamespacePrefix: every key of a namespace starts with its prefix and
// tells its namespace back; no other namespace's key starts with it, and
// neither does the registry's key (named without a length prefix).
func FuzzNamespacePrefix(f *testing.F) {
	f.Add("team", "team2", "e", "r")
	f.Add("a", "a:b", "e", "r")
	f.Add("1:a", "a", "", "")
	f.Add("namespaces", "", "e", "")
	f.Add("te*", "t{x}", "%7B", "}")
	f.Add("", "dep", "e", "r")
	f.Fuzz(func(t *testing.T, ns1, ns2, entity, resource string) {
		key := redisstore.BucketKey("dep", cascade.Key{Namespace: ns1, Entity: entity, Resource: resource})
		if ns1 == "" {
			ns1 = "dep"
		}
		if got, ok := redisstore.NamespaceOfKey(key); !ok || got != ns1 {
			t.Errorf("NamespaceOfKey(%q) = %q, %t; want %q", key, got, ok, ns1)
		}
		if !strings.HasPrefix(key, redisstore.NamespacePrefix(ns1)) {
			t.Errorf("key %q does not start with its namespace's prefix %q", key, redisstore.NamespacePrefix(ns1))
		}
		if ns2 != ns1 && strings.HasPrefix(key, redisstore.NamespacePrefix(ns2)) {
			t.Errorf("key %q of %q starts with the prefix of %q", key, ns1, ns2)
		}
		if strings.HasPrefix(redisstore.RegistryKey, redisstore.NamespacePrefix(ns1)) || strings.HasPrefix(key, redisstore.RegistryKey) {
			t.Errorf("the registry's key %q and namespace %q's key %q overlap", redisstore.RegistryKey, ns1, key)
		}
		if _, ok := redisstore.NamespaceOfKey(redisstore.RegistryKey); ok {
			t.Errorf("the registry's key %q is in a namespace", redisstore.RegistryKey)
		}
	})
}
