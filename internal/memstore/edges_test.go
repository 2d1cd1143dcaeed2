package memstore

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The tests in this file pin the edges that mutation testing (make
// mutation) showed no other test could tell from a neighbour: the byte
// bound of one key, which debits are worth an eviction, how long the
// eviction hand spares a bucket in use, and how the shard hash mixes the
// fields of a key.
//
// Equivalent mutants, read by internal/mutants:
//
// mutant: CONDITIONALS_BOUNDARY memstore.go `sum < old` evicted: a bucket that is not full lacks at least one whole millitoken (Tokens rounds down), so the deficit is never 0 and sum == old never happens.
// mutant: CONDITIONALS_BOUNDARY memstore.go `start < len(buf)` sweep: at start == len(buf) the batch is empty, so the extra pass drops nothing.

// TestKeyByteBound: a key whose entry takes exactly a shard's bytes is
// stored; one byte more is an invalid debit.
func TestKeyByteBound(t *testing.T) {
	per := entryBytes(&bucketKey{key: cascade.Key{Namespace: "default", Entity: "a", Resource: "api"}, limit: "rpm"})
	tests := []struct {
		name     string
		maxBytes int64
		wantErr  error
	}{
		{"exactly a shard's bytes", per, nil},
		{"one byte more than a shard holds", per - 1, cascade.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(WithShards(1), WithMaxBytes(tt.maxBytes))
			_, err := acquire(t, s, debit("a", l3, cascade.Consume, 1000))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Acquire(key of %d bytes, shard of %d) error = %v, want %v", per, tt.maxBytes, err, tt.wantErr)
			}
			if want := map[bool]int{true: 1, false: 0}[tt.wantErr == nil]; s.Stats().Buckets != want {
				t.Errorf("Stats().Buckets = %d, want %d", s.Stats().Buckets, want)
			}
		})
	}
}

// TestWhatEvicts: at the bound, a new bucket evicts another only if its plan
// can leave it less than full (a consume or charge of more than nothing);
// other debits of it are decided on a bucket forgotten at once.
func TestWhatEvicts(t *testing.T) {
	tests := []struct {
		name      string
		op        cascade.Op
		n         tokenbucket.Millitokens
		wantEvict bool
	}{
		{"consume", cascade.Consume, 1000, true},
		{"charge", cascade.Charge, 1000, true},
		{"consume of nothing", cascade.Consume, 0, false},
		{"charge of nothing", cascade.Charge, 0, false},
		{"negative consume", cascade.Consume, -1000, false},
		{"check", cascade.Check, 0, false},
		{"refund", cascade.Refund, 1000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := storetest.NewClock(storetest.Epoch)
			s := New(WithClock(c.Now), WithShards(1), WithMaxBuckets(1))
			mustAcquire(t, s, debit("held", slow, cascade.Consume, 1000))
			if dec := mustAcquire(t, s, debit("new", l3, tt.op, tt.n)); !dec.Admitted {
				t.Fatalf("Acquire(%s %d on a new key at the bound) = %+v, want admitted", tt.op, tt.n, dec)
			}
			evicted := s.Stats().EvictedNotFull == 1
			if evicted != tt.wantEvict {
				t.Errorf("Acquire(%s %d on a new key at the bound) evicted the held bucket = %t, want %t (Stats %+v)", tt.op, tt.n, evicted, tt.wantEvict, s.Stats())
			}
			if got, want := remaining(t, s, "held", slow), map[bool]tokenbucket.Millitokens{true: 3000, false: 2000}[tt.wantEvict]; got != want {
				t.Errorf("remaining(held) = %d, want %d", got, want)
			}
		})
	}
}

// TestEvictionHandSparesUse: a bucket decided on k times after it was
// stored survives min(k, maxUsed) passes of the eviction hand, though it is
// the nearest to full; at the next pass it is the one evicted. Each pass is
// the insert of a new bucket into a shard of two, beside a bucket used
// once.
func TestEvictionHandSparesUse(t *testing.T) {
	for k := range maxUsed + 3 {
		t.Run(fmt.Sprintf("decided on %d more times", k), func(t *testing.T) {
			c := storetest.NewClock(storetest.Epoch)
			s := New(WithClock(c.Now), WithShards(1), WithMaxBuckets(2))
			var evicted []string
			s.onEvict = func(k bucketKey, _ uint64, _ bool) { evicted = append(evicted, k.key.Entity) }
			mustAcquire(t, s, debit("hot", l3, cascade.Consume, 1000)) // full again in 334 ms
			for range k {
				mustAcquire(t, s, debit("hot", l3, cascade.Check, 0))
			}
			mustAcquire(t, s, debit("cold0", slow, cascade.Consume, 1000)) // full again in 20 s
			want := min(k, maxUsed)
			for pass := range maxUsed + 1 {
				evicted = evicted[:0]
				mustAcquire(t, s, debit("cold"+strconv.Itoa(pass+1), slow, cascade.Consume, 1000))
				wantEvicted := "cold" + strconv.Itoa(pass)
				if pass == want {
					wantEvicted = "hot"
				}
				if len(evicted) != 1 || evicted[0] != wantEvicted {
					t.Fatalf("pass %d of the eviction hand evicted %q, want [%s] (hot spared %d passes)", pass, evicted, wantEvicted, want)
				}
				if pass == want {
					return
				}
			}
		})
	}
}

// TestShardHash: bucket limits that differ in one field, or only in where
// the bytes of two fields split, hash apart; equal ones hash equally.
func TestShardHash(t *testing.T) {
	s := New()
	key := func(ns, entity, resource, limit string) *cascade.Debit {
		return &cascade.Debit{Key: cascade.Key{Namespace: ns, Entity: entity, Resource: resource}, Limit: limit}
	}
	many := func(field int) []*cascade.Debit {
		ds := make([]*cascade.Debit, 200)
		for i := range ds {
			f := []string{"ns", "e", "r", "l"}
			f[field] += strconv.Itoa(i)
			ds[i] = key(f[0], f[1], f[2], f[3])
		}
		return ds
	}
	tests := []struct {
		name string
		ds   []*cascade.Debit
	}{
		{"namespaces", many(0)},
		{"entities", many(1)},
		{"resources", many(2)},
		{"limits", many(3)},
		{"bytes moved between namespace and entity", []*cascade.Debit{key("ab", "c", "r", "l"), key("a", "bc", "r", "l")}},
		{"bytes moved between entity and resource", []*cascade.Debit{key("n", "ab", "c", "l"), key("n", "a", "bc", "l")}},
		{"bytes moved between resource and limit", []*cascade.Debit{key("n", "e", "ab", "c"), key("n", "e", "a", "bc")}},
		{"entity and resource swapped", []*cascade.Debit{key("n", "x", "y", "l"), key("n", "y", "x", "l")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := map[uint64]*cascade.Debit{}
			for _, d := range tt.ds {
				h := s.hash(d)
				if o, dup := seen[h]; dup {
					t.Fatalf("hash(%+v %s) = %#x, the hash of %+v %s", d.Key, d.Limit, h, o.Key, o.Limit)
				}
				seen[h] = d
				if again := s.hash(key(d.Key.Namespace, d.Key.Entity, d.Key.Resource, d.Limit)); again != h {
					t.Fatalf("hash(%+v %s) = %#x, then %#x", d.Key, d.Limit, h, again)
				}
			}
		})
	}
}
