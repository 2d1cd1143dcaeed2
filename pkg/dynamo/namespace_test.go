package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// keyRecorder wraps an API and records the partition key of every item a
// call reads or writes (Query records its key condition's :p value).
type keyRecorder struct {
	dynamo.API
	mu  sync.Mutex
	pks map[string][]string // PK → operations that touched it
}

func newKeyRecorder(api dynamo.API) *keyRecorder {
	return &keyRecorder{API: api, pks: map[string][]string{}}
}

func (r *keyRecorder) add(op string, key map[string]types.AttributeValue) {
	pk, _ := key["PK"].(*types.AttributeValueMemberS)
	if pk == nil {
		return
	}
	r.mu.Lock()
	r.pks[pk.Value] = append(r.pks[pk.Value], op)
	r.mu.Unlock()
}

// touched returns a copy of what was recorded, and forgets it.
func (r *keyRecorder) touched() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.pks
	r.pks = map[string][]string{}
	return out
}

func (r *keyRecorder) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.add("GetItem", in.Key)
	return r.API.GetItem(ctx, in, o...)
}

func (r *keyRecorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	r.add("PutItem", in.Item)
	return r.API.PutItem(ctx, in, o...)
}

func (r *keyRecorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.add("UpdateItem", in.Key)
	return r.API.UpdateItem(ctx, in, o...)
}

func (r *keyRecorder) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	r.add("DeleteItem", in.Key)
	return r.API.DeleteItem(ctx, in, o...)
}

func (r *keyRecorder) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	for _, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			r.add("BatchGetItem", k)
		}
	}
	return r.API.BatchGetItem(ctx, in, o...)
}

func (r *keyRecorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			r.add("TransactWriteItems", it.Put.Item)
		case it.Update != nil:
			r.add("TransactWriteItems", it.Update.Key)
		case it.Delete != nil:
			r.add("TransactWriteItems", it.Delete.Key)
		case it.ConditionCheck != nil:
			r.add("TransactWriteItems", it.ConditionCheck.Key)
		}
	}
	return r.API.TransactWriteItems(ctx, in, o...)
}

func (r *keyRecorder) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if p, ok := in.ExpressionAttributeValues[":p"]; ok {
		r.add("Query", map[string]types.AttributeValue{"PK": p})
	}
	return r.API.Query(ctx, in, o...)
}

// TestEmptyNamespaceIsTheStores drives every path of a store configured
// with Namespace "team-a" with keys, scopes and entities that name no
// namespace: admin writes (limits at every scope, an entity with a parent),
// a plan that resolves stored limits, a refused plan over two items that
// gives back what it took, a charge, a pre-sharded bucket (a transaction)
// and Status. Every item read or written is under "nteam-a/" (or the
// system prefix, for the schema version), none under the default
// namespace; the stored limits apply; and a debit naming "team-a" and one
// naming none are the same bucket.
func TestEmptyNamespaceIsTheStores(t *testing.T) {
	f := fakeTable(t)
	rec := newKeyRecorder(f)
	c := newClock()
	s := newStoreCfg(t, rec, dynamo.Config{Table: "t", Namespace: "team-a", Timeout: time.Second}, c)
	ctx := context.Background()
	set := func(sc admin.Scope, name string, tokens uint64) {
		t.Helper()
		if err := admin.New(s).SetLimits(ctx, sc, map[string]tokenbucket.Limit{name: mustLimit(t, tokens, time.Hour, 0)}); err != nil {
			t.Fatalf("SetLimits(%v) = %v", sc, err)
		}
	}
	set(admin.Scope{Entity: "e", Resource: "r"}, "rpm", 2)
	set(admin.Scope{Entity: "e"}, "daily", 50)
	set(admin.Scope{Resource: "r"}, "burst", 40)
	set(admin.Scope{System: true}, "global", 30)
	if err := admin.New(s).PutEntity(ctx, dynamo.Entity{ID: "e", Parent: "org", Cascade: true}); err != nil {
		t.Fatalf("PutEntity() = %v", err)
	}
	if ent, err := admin.New(s).Entity(ctx, "team-a", "e"); err != nil || ent.Parent != "org" {
		t.Errorf("Entity(team-a, e) = %+v, %v, want the entity put without a namespace", ent, err)
	}
	if kids, err := admin.New(s).Children(ctx, "", "org"); err != nil || len(kids) != 1 || kids[0] != "e" {
		t.Errorf("Children(\"\", org) = %v, %v, want [e]", kids, err)
	}
	if _, err := admin.New(s).Audit(ctx, admin.Scope{Entity: "e"}); err != nil {
		t.Errorf("Audit(e) = %v", err)
	}
	if got, err := admin.New(s).Limits(ctx, admin.Scope{Namespace: "team-a", Entity: "e", Resource: "r"}); err != nil || len(got) != 1 {
		t.Errorf("Limits(team-a/e/r) = %v, %v, want the limits set without a namespace", got, err)
	}

	plan := 100 * tokenbucket.PerToken
	yaml := mustLimit(t, 100, time.Hour, 0)
	debit := func(k cascade.Key, limit string, op cascade.Op) cascade.Debit {
		return cascade.Debit{Key: k, Limit: limit, Bucket: yaml, Amount: tokenbucket.PerToken, Op: op}
	}
	unnamed := cascade.Key{Entity: "e", Resource: "r"}
	named := cascade.Key{Namespace: "team-a", Entity: "e", Resource: "r"}
	// Stored limits resolve in the store's namespace, at every scope.
	dec, err := s.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{
		debit(unnamed, "rpm", cascade.Consume), debit(unnamed, "daily", cascade.Consume),
		debit(unnamed, "burst", cascade.Consume), debit(unnamed, "global", cascade.Consume),
	}})
	if err != nil || !dec.Admitted {
		t.Fatalf("Acquire(unnamed) = %+v, %v, want admitted", dec, err)
	}
	for i, want := range []uint64{2, 50, 40, 30} {
		if got := dec.Statuses[i].Bucket.Capacity; got != tokenbucket.Millitokens(want)*tokenbucket.PerToken {
			t.Errorf("Acquire(unnamed) debit %d capacity = %d, want the stored %d tokens (not the plan's %d)", i, got, want, plan)
		}
	}
	// A debit naming team-a is the same bucket: rpm (2) has one token left.
	if dec, err := s.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{debit(named, "rpm", cascade.Consume)}}); err != nil || !dec.Admitted || dec.Statuses[0].Remaining != 0 {
		t.Errorf("Acquire(team-a/e/r rpm) = %+v, %v, want admitted with 0 left (one bucket with the unnamed key)", dec, err)
	}
	// One plan naming the bucket both ways is one bucket, now empty.
	if dec, err := s.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{debit(unnamed, "rpm", cascade.Consume), debit(named, "other", cascade.Consume)}}); err != nil || dec.Admitted {
		t.Errorf("Acquire(unnamed rpm, named other) = %+v, %v, want refused (rpm is empty)", dec, err)
	}
	// A refused plan over two items gives back what the first took.
	dec, err = s.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{
		debit(cascade.Key{Entity: "f", Resource: "r"}, "x", cascade.Consume), debit(unnamed, "rpm", cascade.Consume),
	}})
	if err != nil || dec.Admitted {
		t.Errorf("Acquire(f/r x, e/r rpm) = %+v, %v, want refused", dec, err)
	}
	// A charge, a pre-sharded bucket and Status.
	if _, err := s.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{debit(cascade.Key{Entity: "g", Resource: "r"}, "x", cascade.Charge)}}); err != nil {
		t.Errorf("Acquire(charge) = %v", err)
	}
	if err := admin.New(s).SetShards(ctx, cascade.Key{Entity: "h", Resource: "r"}, 2, map[string]tokenbucket.Limit{"x": yaml}); err != nil {
		t.Errorf("SetShards(h/r) = %v", err)
	}
	if _, err := admin.New(s).Status(ctx, cascade.Key{Entity: "h", Resource: "r"}, map[string]tokenbucket.Limit{"x": yaml}); err != nil {
		t.Errorf("Status(h/r) = %v", err)
	}

	touched := rec.touched()
	if len(touched) == 0 {
		t.Fatal("no item was touched")
	}
	kinds := map[string]bool{}
	for pk, ops := range touched {
		switch {
		case strings.HasPrefix(pk, "nteam-a/"):
			kind, _, _ := strings.Cut(strings.TrimPrefix(pk, "nteam-a/"), "#")
			kinds[kind] = true
		case pk == "_/SYSTEM#":
		default:
			t.Errorf("item %q touched by %v: outside the store's namespace", pk, ops)
		}
	}
	for _, kind := range []string{"BUCKET", "ENTITY", "RESOURCE", "SYSTEM", "AUDIT", "PARENT"} {
		if !kinds[kind] {
			t.Errorf("no %s item under nteam-a/ was touched (touched %v): the test no longer covers it", kind, kinds)
		}
	}
	for _, it := range f.Items("t") {
		pk := it["PK"].(*types.AttributeValueMemberS).Value
		if !strings.HasPrefix(pk, "nteam-a/") && !strings.HasPrefix(pk, "_/") {
			t.Errorf("stored item %q: outside the store's namespace and the system prefix", pk)
		}
	}
}

// TestNamespacesShareNoState runs two stores on one table, one with
// Namespace "team-a" and one with "team-b", with the same unnamed key and
// the same limits stored through each: each admits exactly its own
// capacity, a refusal cached in one namespace never answers for the other
// (within one store, for a key naming the other namespace, as well), and
// stored limits and entities of one are not found through the other.
func TestNamespacesShareNoState(t *testing.T) {
	f := fakeTable(t)
	c := newClock()
	ctx := context.Background()
	obs := &countingObserver{}
	a := newStoreCfg(t, f, dynamo.Config{Table: "t", Namespace: "team-a", Timeout: time.Second}, c, dynamo.WithObserver(obs))
	b := newStoreCfg(t, f, dynamo.Config{Table: "t", Namespace: "team-b", Timeout: time.Second}, c)
	lim := mustLimit(t, 3, time.Hour, 0)
	if err := admin.New(a).SetLimits(ctx, admin.Scope{Entity: "e"}, map[string]tokenbucket.Limit{"rpm": mustLimit(t, 2, time.Hour, 0)}); err != nil {
		t.Fatalf("SetLimits(team-a) = %v", err)
	}
	if err := admin.New(a).PutEntity(ctx, dynamo.Entity{ID: "e"}); err != nil {
		t.Fatalf("PutEntity(team-a) = %v", err)
	}
	if _, err := admin.New(b).Limits(ctx, admin.Scope{Entity: "e"}); !errors.Is(err, dynamo.ErrNotFound) {
		t.Errorf("team-b Limits(e) = %v, want ErrNotFound", err)
	}
	if _, err := admin.New(b).Entity(ctx, "", "e"); !errors.Is(err, dynamo.ErrNotFound) {
		t.Errorf("team-b Entity(e) = %v, want ErrNotFound", err)
	}

	key := cascade.Key{Entity: "e", Resource: "r"}
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: key, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
	admitted := func(s *dynamo.Store, p *cascade.Plan, n int) int {
		t.Helper()
		got := 0
		for range n {
			dec, err := s.Acquire(ctx, p)
			if err != nil {
				t.Fatalf("Acquire() = %v", err)
			}
			if dec.Admitted {
				got++
			}
		}
		return got
	}
	if got := admitted(a, p, 5); got != 2 {
		t.Errorf("team-a admitted %d of 5, want 2 (its stored limit)", got)
	}
	hits := obs.hits.Load()
	if hits == 0 {
		t.Fatal("team-a: no refusal answered from the rejection cache; the test needs one cached")
	}
	if got := admitted(b, p, 5); got != 3 {
		t.Errorf("team-b admitted %d of 5, want 3 (the plan's limit, its own bucket)", got)
	}
	// The same store, the same entity and resource, another namespace: its
	// cached refusal and image of team-a's bucket do not answer.
	other := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Namespace: "team-c", Entity: "e", Resource: "r"}, Limit: "rpm", Bucket: lim, Amount: tokenbucket.PerToken}}}
	if got := admitted(a, other, 1); got != 1 {
		t.Errorf("team-a store, key in team-c: admitted %d of 1 after team-a's bucket refused, want 1", got)
	}
	if got := obs.hits.Load(); got != hits {
		t.Errorf("rejection cache hits went from %d to %d on a key of another namespace, want unchanged", hits, got)
	}
}
