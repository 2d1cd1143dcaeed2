package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// chainEntity is an entity record to store, with the limits stored for it
// (its default, and for resource "r").
type chainEntity struct {
	id, parent string
	cascade    bool
	def, forR  map[string]tokenbucket.Limit
}

// putChain stores ents and their limits through the store's admin calls.
func putChain(t *testing.T, s *dynamo.Store, ents ...chainEntity) {
	t.Helper()
	ctx := context.Background()
	for _, e := range ents {
		if err := admin.New(s).PutEntity(ctx, dynamo.Entity{ID: e.id, Parent: e.parent, Cascade: e.cascade}); err != nil {
			t.Fatalf("PutEntity(%s) = %v", e.id, err)
		}
		if e.def != nil {
			if err := admin.New(s).SetLimits(ctx, admin.Scope{Entity: e.id}, e.def); err != nil {
				t.Fatalf("SetLimits(%s) = %v", e.id, err)
			}
		}
		if e.forR != nil {
			if err := admin.New(s).SetLimits(ctx, admin.Scope{Entity: e.id, Resource: "r"}, e.forR); err != nil {
				t.Fatalf("SetLimits(%s, r) = %v", e.id, err)
			}
		}
	}
}

func limits(t *testing.T, kv ...any) map[string]tokenbucket.Limit {
	t.Helper()
	m := map[string]tokenbucket.Limit{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = mustLimit(t, uint64(kv[i+1].(int)), time.Minute, 0)
	}
	return m
}

func named(t *testing.T, kv ...any) []cascade.NamedLimit {
	t.Helper()
	var out []cascade.NamedLimit
	for i := 0; i < len(kv); i += 2 {
		out = append(out, cascade.NamedLimit{Name: kv[i].(string), Bucket: mustLimit(t, uint64(kv[i+1].(int)), time.Minute, 0)})
	}
	return out
}

// TestAncestorsChain stores chains of entity records and wants, for each
// key, the ancestors its debits cascade to, nearest first, each with the
// limits stored for it and the resource (else its default), on the fake
// and on DynamoDB Local.
func TestAncestorsChain(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			s := newStore(t, api, table, newClock())
			putChain(t, s,
				// key-1 → proj → acme, every level with limits.
				chainEntity{id: "acme", cascade: true, def: limits(t, "tpm", 1000, "rpm", 100)},
				chainEntity{id: "proj", parent: "acme", cascade: true, def: limits(t, "rpm", 50), forR: limits(t, "rpm", 20)},
				chainEntity{id: "key-1", parent: "proj", def: limits(t, "rpm", 5)},
				// A parent that does not cascade stops the chain.
				chainEntity{id: "top2", cascade: true},
				chainEntity{id: "mid2", parent: "top2"},
				chainEntity{id: "key-2", parent: "mid2"},
				// A grandparent that does not cascade stops it after the parent.
				chainEntity{id: "top3"},
				chainEntity{id: "mid3", parent: "top3", cascade: true},
				chainEntity{id: "key-3", parent: "mid3"},
				// A parent without a record ends it.
				chainEntity{id: "key-4", parent: "ghost"},
				// An org%2Fteam id: the escaped form a request names.
				chainEntity{id: "org%2Fteam", cascade: true},
				chainEntity{id: "key-5", parent: "org%2Fteam"},
			)
			cases := []struct {
				name string
				key  cascade.Key
				max  int
				want []cascade.Ancestor
			}{
				{"three levels", cascade.Key{Entity: "key-1", Resource: "r"}, descriptors.MaxChain, []cascade.Ancestor{
					{Key: cascade.Key{Namespace: "default", Entity: "proj", Resource: "r"}, Limits: named(t, "rpm", 20)},
					{Key: cascade.Key{Namespace: "default", Entity: "acme", Resource: "r"}, Limits: named(t, "rpm", 100, "tpm", 1000)},
				}},
				{"entity default of another resource", cascade.Key{Entity: "key-1", Resource: "other"}, descriptors.MaxChain, []cascade.Ancestor{
					{Key: cascade.Key{Namespace: "default", Entity: "proj", Resource: "other"}, Limits: named(t, "rpm", 50)},
					{Key: cascade.Key{Namespace: "default", Entity: "acme", Resource: "other"}, Limits: named(t, "rpm", 100, "tpm", 1000)},
				}},
				{"branch suffix kept", cascade.Key{Namespace: "default", Entity: "key-1#route=a", Resource: "r"}, descriptors.MaxChain, []cascade.Ancestor{
					{Key: cascade.Key{Namespace: "default", Entity: "proj#route=a", Resource: "r"}, Limits: named(t, "rpm", 20)},
					{Key: cascade.Key{Namespace: "default", Entity: "acme#route=a", Resource: "r"}, Limits: named(t, "rpm", 100, "tpm", 1000)},
				}},
				{"at most max", cascade.Key{Entity: "key-1", Resource: "r"}, 1, []cascade.Ancestor{
					{Key: cascade.Key{Namespace: "default", Entity: "proj", Resource: "r"}, Limits: named(t, "rpm", 20)},
				}},
				{"max 0", cascade.Key{Entity: "key-1", Resource: "r"}, 0, nil},
				{"from the middle", cascade.Key{Entity: "proj", Resource: "r"}, descriptors.MaxChain, []cascade.Ancestor{
					{Key: cascade.Key{Namespace: "default", Entity: "acme", Resource: "r"}, Limits: named(t, "rpm", 100, "tpm", 1000)},
				}},
				{"top has none", cascade.Key{Entity: "acme", Resource: "r"}, descriptors.MaxChain, nil},
				{"non-cascading parent stops", cascade.Key{Entity: "key-2", Resource: "r"}, descriptors.MaxChain, nil},
				{"non-cascading grandparent stops", cascade.Key{Entity: "key-3", Resource: "r"}, descriptors.MaxChain, []cascade.Ancestor{
					{Key: cascade.Key{Namespace: "default", Entity: "mid3", Resource: "r"}},
				}},
				{"parent without a record", cascade.Key{Entity: "key-4", Resource: "r"}, descriptors.MaxChain, nil},
				{"no record", cascade.Key{Entity: "nobody", Resource: "r"}, descriptors.MaxChain, nil},
				{"escaped parent", cascade.Key{Entity: "key-5", Resource: "r"}, descriptors.MaxChain, []cascade.Ancestor{
					{Key: cascade.Key{Namespace: "default", Entity: "org%2Fteam", Resource: "r"}},
				}},
				{"another namespace", cascade.Key{Namespace: "other", Entity: "key-1", Resource: "r"}, descriptors.MaxChain, nil},
			}
			for _, c := range cases {
				got, err := s.Ancestors(context.Background(), c.key, c.max)
				if err != nil || !reflect.DeepEqual(got, c.want) {
					t.Errorf("%s: Ancestors(%+v, %d) = %+v, %v, want %+v", c.name, c.key, c.max, got, err, c.want)
				}
			}
			// The stored limits of key-1 apply to its branch buckets.
			p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "key-1#route=a", Resource: "r"}, Limit: "rpm", Bucket: mustLimit(t, 1000, time.Minute, 0), Amount: tokenbucket.PerToken}}}
			if dec, err := s.Acquire(context.Background(), p); err != nil || dec.Statuses[0].Bucket != mustLimit(t, 5, time.Minute, 0) {
				t.Errorf("Acquire(key-1#route=a) = %+v, %v, want key-1's stored rpm:5/min", dec, err)
			}
		})
	}
}

// TestAncestorsReads counts DynamoDB calls: a cold chain of three levels
// reads each level once (one BatchGetItem of the entity record and its two
// config records), a warm one makes no call, and concurrent cold walks
// share the reads.
func TestAncestorsReads(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	putChain(t, s,
		chainEntity{id: "acme", cascade: true, def: limits(t, "rpm", 100)},
		chainEntity{id: "proj", parent: "acme", cascade: true, forR: limits(t, "rpm", 20)},
		chainEntity{id: "key-1", parent: "proj"},
	)
	key := cascade.Key{Entity: "key-1", Resource: "r"}
	// A replica of its own: PutEntity's reads warmed s's entity cache.
	cold := newStore(t, f, "t", newClock())
	f.ResetCalls()
	if got, err := cold.Ancestors(context.Background(), key, descriptors.MaxChain); err != nil || len(got) != 2 {
		t.Fatalf("Ancestors() cold = %+v, %v, want two ancestors", got, err)
	}
	if n := f.Calls("BatchGetItem"); n != 3 {
		t.Errorf("cold chain: %d BatchGetItem calls, want 3 (one per level)", n)
	}
	f.ResetCalls()
	for range 3 {
		if got, err := cold.Ancestors(context.Background(), key, descriptors.MaxChain); err != nil || len(got) != 2 {
			t.Fatalf("Ancestors() warm = %+v, %v, want two ancestors", got, err)
		}
	}
	for _, op := range []string{"BatchGetItem", "GetItem", "Query"} {
		if n := f.Calls(op); n != 0 {
			t.Errorf("warm chain: %d %s calls, want none", n, op)
		}
	}
	// The own level's config records are the ones the plan's stored
	// limits come from: a plan after the walk reads no config record.
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpm", Bucket: mustLimit(t, 10, time.Minute, 0), Amount: tokenbucket.PerToken}}}
	if _, err := cold.Acquire(context.Background(), p); err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if n := f.Calls("BatchGetItem"); n != 1 { // the resource and system records only
		t.Errorf("Acquire after the walk: %d BatchGetItem calls, want 1", n)
	}

	// Concurrent cold walks: every read is slow, so that the walks pile
	// up on each level's read.
	shared := newStore(t, f, "t", newClock())
	f.ResetCalls()
	gate := make(chan struct{})
	f.SetFail(func(ctx context.Context, op string) error {
		if op == "BatchGetItem" {
			<-gate
			time.Sleep(30 * time.Millisecond)
		}
		return nil
	})
	const walkers = 20
	var wg sync.WaitGroup
	errs := make(chan error, walkers)
	for range walkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := shared.Ancestors(context.Background(), key, descriptors.MaxChain)
			if err == nil && len(got) != 2 {
				err = fmt.Errorf("got %+v, want two ancestors", got)
			}
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond) // every walker waits on the first level's read
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Ancestors() = %v", err)
		}
	}
	if n := f.Calls("BatchGetItem"); n != 3 {
		t.Errorf("%d concurrent cold walks: %d BatchGetItem calls, want 3 (one per level)", walkers, n)
	}
}

// TestPutEntityRefuses: PutEntity refuses a parent that would make a
// cycle, a chain of more than descriptors.MaxChain entities, and ids no
// request value can name, each with an error that names the fix; on the
// fake and on DynamoDB Local.
func TestPutEntityRefuses(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			s := newStore(t, api, table, newClock())
			ctx := context.Background()
			putChain(t, s, chainEntity{id: "a"}, chainEntity{id: "b", parent: "a"}, chainEntity{id: "c", parent: "b"})
			for i := 1; i <= descriptors.MaxChain; i++ { // d1 ← d2 ← … ← d8: eight entities
				e := chainEntity{id: fmt.Sprintf("d%d", i)}
				if i > 1 {
					e.parent = fmt.Sprintf("d%d", i-1)
				}
				putChain(t, s, e)
			}
			cases := []struct {
				name string
				ent  dynamo.Entity
				want string // in the error; empty: accepted
			}{
				{"own parent", dynamo.Entity{ID: "a", Parent: "a"}, "its own parent"},
				{"cycle", dynamo.Entity{ID: "a", Parent: "c"}, `would make a cycle (a -> c -> b -> a)`},
				{"re-parent below itself", dynamo.Entity{ID: "b", Parent: "c"}, "would make a cycle"},
				{"nine entities", dynamo.Entity{ID: "d9", Parent: "d8"}, "more than 8 entities"},
				{"re-parent past the bound", dynamo.Entity{ID: "c", Parent: "d8"}, "more than 8 entities"},
				{"slash in id", dynamo.Entity{ID: "org/team"}, `use "org%2Fteam"`},
				{"hash in parent", dynamo.Entity{ID: "e", Parent: "x#y"}, `use "x%23y"`},
				{"equals in id", dynamo.Entity{ID: "generic_key=demo"}, `use "generic_key%3Ddemo"`},
				{"stray percent", dynamo.Entity{ID: "100%"}, `use "100%25"`},
				{"lower-case escape", dynamo.Entity{ID: "org%2fteam"}, `use "org%2Fteam"`},
				{"needless escape", dynamo.Entity{ID: "%41cme"}, `use "Acme"`},
				{"eight entities", dynamo.Entity{ID: "e8", Parent: "d7"}, ""},
				{"re-parent elsewhere", dynamo.Entity{ID: "c", Parent: "a"}, ""},
				{"escaped form", dynamo.Entity{ID: "org%2Fteam", Parent: "a"}, ""},
			}
			for _, c := range cases {
				err := admin.New(s).PutEntity(ctx, c.ent)
				switch {
				case c.want == "" && err != nil:
					t.Errorf("%s: PutEntity(%+v) = %v, want accepted", c.name, c.ent, err)
				case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
					t.Errorf("%s: PutEntity(%+v) = %v, want an error with %q", c.name, c.ent, err, c.want)
				}
			}
			if e, err := admin.New(s).Entity(ctx, "", "a"); err != nil || e.Parent != "" {
				t.Errorf("Entity(a) after the refusals = %+v, %v, want no parent", e, err)
			}
		})
	}
}

// putRaw writes an entity record behind the store's back, as another tool
// could.
func putRaw(t *testing.T, api dynamo.API, table, id, parent string, cascadeOn bool) {
	t.Helper()
	item := map[string]types.AttributeValue{ // ids here are [a-z0-9-]: their keys need no escape
		"PK":      &types.AttributeValueMemberS{Value: "ndefault/ENTITY#" + id},
		"SK":      &types.AttributeValueMemberS{Value: "#META"},
		"id":      &types.AttributeValueMemberS{Value: id},
		"ns":      &types.AttributeValueMemberS{Value: "default"},
		"cascade": &types.AttributeValueMemberBOOL{Value: cascadeOn},
	}
	if parent != "" {
		item["parent_id"] = &types.AttributeValueMemberS{Value: parent}
	}
	if _, err := api.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem(%s) = %v", id, err)
	}
}

// TestAncestorsCycleWrittenBehind: a cycle of entity records written
// behind the store's back (raw PutItem) ends the walk before it repeats:
// the request is charged each entity of the cycle at most once, and the
// walk returns. Run on the fake and on DynamoDB Local.
func TestAncestorsCycleWrittenBehind(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			s := newStore(t, api, table, newClock())
			putRaw(t, api, table, "x", "y", true)
			putRaw(t, api, table, "y", "x", true)
			putRaw(t, api, table, "self", "self", true)
			putRaw(t, api, table, "k", "x", false)
			cases := []struct {
				entity string
				want   []string
			}{
				{"x", []string{"y"}},
				{"y", []string{"x"}},
				{"k", []string{"x", "y"}},
				{"self", nil},
			}
			for _, c := range cases {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				got, err := s.Ancestors(ctx, cascade.Key{Entity: c.entity, Resource: "r"}, descriptors.MaxChain)
				cancel()
				var ids []string
				for _, a := range got {
					ids = append(ids, a.Key.Entity)
				}
				if err != nil || !reflect.DeepEqual(ids, c.want) {
					t.Errorf("Ancestors(%s) = %v, %v, want %v", c.entity, ids, err, c.want)
				}
			}
		})
	}
}

// TestAncestorsReparent: a replica sees a parent changed by another within
// its entity cache's lifetime, and not before the entry expires.
func TestAncestorsReparent(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	writer := newStore(t, f, "t", c)
	putChain(t, writer, chainEntity{id: "p1", cascade: true}, chainEntity{id: "p2", cascade: true}, chainEntity{id: "k", parent: "p1"})
	s := newStore(t, f, "t", c)
	key := cascade.Key{Entity: "k", Resource: "r"}
	parents := func() []string {
		t.Helper()
		got, err := s.Ancestors(context.Background(), key, descriptors.MaxChain)
		if err != nil {
			t.Fatalf("Ancestors() = %v", err)
		}
		var ids []string
		for _, a := range got {
			ids = append(ids, a.Key.Entity)
		}
		return ids
	}
	if got := parents(); !reflect.DeepEqual(got, []string{"p1"}) {
		t.Fatalf("Ancestors() = %v, want [p1]", got)
	}
	if err := admin.New(writer).PutEntity(context.Background(), dynamo.Entity{ID: "k", Parent: "p2"}); err != nil {
		t.Fatalf("PutEntity(k -parent p2) = %v", err)
	}
	c.Advance(dynamo.DefaultConfigCacheTTL * 8 / 10) // within every entry's lifetime (±10%)
	if got := parents(); !reflect.DeepEqual(got, []string{"p1"}) {
		t.Errorf("Ancestors() within the cache lifetime = %v, want the cached [p1]", got)
	}
	c.Advance(dynamo.DefaultConfigCacheTTL * 4 / 10) // past every entry's lifetime
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The first walk past the lifetime is served the stale entry
		// while one read refreshes it.
		got := parents()
		if reflect.DeepEqual(got, []string{"p2"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ancestors() after the cache lifetime = %v, want [p2]", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAncestorsErrors: a walk whose budget ends while it waits for a read
// that another decision started is contended (cascade.ErrContended,
// counted under ContendedRead), never an outage; DynamoDB failing the read
// is ErrUnavailable.
func TestAncestorsErrors(t *testing.T) {
	f := fakeTable(t)
	obs := &countingObserver{}
	s := newStore(t, f, "t", newClock(), dynamo.WithObserver(obs))
	putRaw(t, f, "t", "k", "p", false)
	putRaw(t, f, "t", "p", "", true)
	key := cascade.Key{Entity: "k", Resource: "r"}

	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	f.SetFail(func(ctx context.Context, op string) error {
		if op == "BatchGetItem" {
			select {
			case started <- struct{}{}:
			default:
			}
			<-gate
		}
		return nil
	})
	first := make(chan error, 1)
	go func() {
		_, err := s.Ancestors(context.Background(), key, descriptors.MaxChain)
		first <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := s.Ancestors(ctx, key, descriptors.MaxChain)
	cancel()
	if !errors.Is(err, cascade.ErrContended) || errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("Ancestors() whose budget ends on a shared read = %v, want cascade.ErrContended", err)
	}
	if n := obs.contended.Load(); n != 1 {
		t.Errorf("Contended() called %d times, want 1", n)
	}
	close(gate)
	if err := <-first; err != nil {
		t.Errorf("Ancestors() that started the read = %v, want nil", err)
	}

	down := newStore(t, f, "t", newClock())
	failOn(f, "BatchGetItem", 0, &types.InternalServerError{Message: aws.String("down")})
	if _, err := down.Ancestors(context.Background(), key, descriptors.MaxChain); !errors.Is(err, dynamo.ErrUnavailable) || errors.Is(err, cascade.ErrContended) {
		t.Errorf("Ancestors() while DynamoDB fails = %v, want ErrUnavailable", err)
	}
}

// TestBucketItemsCarryNoHierarchy: bucket items keep no parent_id or
// cascade attribute; entity records do.
func TestBucketItemsCarryNoHierarchy(t *testing.T) {
	f := fakeTable(t)
	s := newStore(t, f, "t", newClock())
	putChain(t, s, chainEntity{id: "acme", cascade: true}, chainEntity{id: "key-1", parent: "acme", cascade: true})
	key := cascade.Key{Entity: "key-1", Resource: "r"}
	if _, err := s.Ancestors(context.Background(), key, descriptors.MaxChain); err != nil {
		t.Fatalf("Ancestors() = %v", err)
	}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpm", Bucket: mustLimit(t, 10, time.Minute, 0), Amount: tokenbucket.PerToken}}}
	if _, err := s.Acquire(context.Background(), p); err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	items := bucketItems(f)
	if len(items) == 0 {
		t.Fatalf("no bucket item written")
	}
	for _, it := range items {
		for _, a := range []string{"parent_id", "cascade"} {
			if _, ok := it[a]; ok {
				t.Errorf("bucket item %v has %s", it["PK"], a)
			}
		}
	}
}
