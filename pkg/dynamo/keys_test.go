package dynamo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestKeyInjection drains one bucket of each pair built to collide under
// naive concatenation of namespace, entity, resource and limit, and wants
// the other bucket untouched.
func TestKeyInjection(t *testing.T) {
	long := strings.Repeat("a", 2048)
	pairs := []struct {
		name string
		a, b cascade.Key
		la   string
		lb   string
	}{
		{"hash between entity and resource", cascade.Key{Entity: "a#b", Resource: "c"}, cascade.Key{Entity: "a", Resource: "b#c"}, "rpm", "rpm"},
		{"slash in namespace", cascade.Key{Namespace: "x/BUCKET#y", Entity: "e", Resource: "r"}, cascade.Key{Namespace: "x", Entity: "y#e", Resource: "r"}, "rpm", "rpm"},
		{"escape forged", cascade.Key{Entity: "%23", Resource: "r"}, cascade.Key{Entity: "#", Resource: "r"}, "rpm", "rpm"},
		{"shard suffix forged", cascade.Key{Entity: "e", Resource: "r#0"}, cascade.Key{Entity: "e#r", Resource: "0"}, "rpm", "rpm"},
		{"unicode", cascade.Key{Entity: "é", Resource: "r"}, cascade.Key{Entity: "e\u0301", Resource: "r"}, "rpm", "rpm"},
		{"empty fields", cascade.Key{Entity: "", Resource: "#"}, cascade.Key{Entity: "#", Resource: ""}, "rpm", "rpm"},
		{"system namespace", cascade.Key{Namespace: "_", Entity: "SYSTEM", Resource: "r"}, cascade.Key{Namespace: "n_", Entity: "SYSTEM", Resource: "r"}, "rpm", "rpm"},
		{"2 KB values", cascade.Key{Entity: long, Resource: long}, cascade.Key{Entity: long + "b", Resource: long}, "rpm", "rpm"},
		{"hashed form forged", cascade.Key{Entity: long, Resource: "r"}, cascade.Key{Entity: "~" + strings.Repeat("0", 64), Resource: "r"}, "rpm", "rpm"},
		{"limit names", cascade.Key{Entity: "e", Resource: "r"}, cascade.Key{Entity: "e", Resource: "r"}, "a_tk", "a"},
		{"limit placeholders", cascade.Key{Entity: "e", Resource: "r"}, cascade.Key{Entity: "e", Resource: "r"}, "#a0", ":v0"},
		{"limit wcu", cascade.Key{Entity: "e2", Resource: "r"}, cascade.Key{Entity: "e2", Resource: "r"}, "wcu", "x"},
	}
	lim, err := tokenbucket.Rate(3, time.Hour, 0)
	if err != nil {
		t.Fatalf("Rate() = %v", err)
	}
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			c := newClock()
			s := newStore(t, api, table, c)
			for _, p := range pairs {
				drain := &cascade.Plan{Debits: []cascade.Debit{{Key: p.a, Limit: p.la, Bucket: lim, Amount: 3 * tokenbucket.PerToken}}}
				if dec, err := s.Acquire(context.Background(), drain); err != nil || !dec.Admitted {
					t.Fatalf("%s: Acquire(drain %q) = %+v, %v, want admitted", p.name, p.a, dec, err)
				}
				probe := &cascade.Plan{Debits: []cascade.Debit{{Key: p.b, Limit: p.lb, Bucket: lim, Amount: tokenbucket.PerToken}}}
				dec, err := s.Acquire(context.Background(), probe)
				if err != nil || !dec.Admitted || dec.Statuses[0].Remaining != 2*tokenbucket.PerToken {
					t.Errorf("%s: Acquire(%q/%q) after draining %q/%q = %+v, %v, want admitted with 2 tokens left", p.name, p.b, p.lb, p.a, p.la, dec, err)
				}
			}
		})
	}
}

// TestConfigResolution stores limits at every scope and wants each debit to
// take the most specific: entity+resource > entity > resource > system >
// the plan's own.
func TestConfigResolution(t *testing.T) {
	api, table := backends()[0].API(t)
	c := newClock()
	adm := admin.New(newStore(t, api, table, c))
	ctx := context.Background()
	yaml := mustLimit(t, 100, time.Second, 0)
	set := func(sc admin.Scope, tokens uint64) {
		t.Helper()
		if err := adm.SetLimits(ctx, sc, map[string]tokenbucket.Limit{"rpm": mustLimit(t, tokens, time.Minute, 0)}); err != nil {
			t.Fatalf("SetLimits(%v) = %v", sc, err)
		}
	}
	set(admin.Scope{System: true}, 1)
	set(admin.Scope{Resource: "r"}, 2)
	set(admin.Scope{Entity: "e3"}, 3)
	set(admin.Scope{Entity: "e4"}, 3)
	set(admin.Scope{Entity: "e4", Resource: "r"}, 4)
	cases := []struct {
		name string
		key  cascade.Key
		want int64 // capacity in tokens
	}{
		{"system", cascade.Key{Entity: "e1", Resource: "other"}, 1},
		{"resource", cascade.Key{Entity: "e2", Resource: "r"}, 2},
		{"entity default", cascade.Key{Entity: "e3", Resource: "r"}, 3},
		{"entity and resource", cascade.Key{Entity: "e4", Resource: "r"}, 4},
		{"other namespace keeps the plan's", cascade.Key{Namespace: "other", Entity: "e4", Resource: "r"}, 100},
	}
	s := newStore(t, api, table, c)
	for _, cs := range cases {
		p := &cascade.Plan{Debits: []cascade.Debit{{Key: cs.key, Limit: "rpm", Bucket: yaml, Amount: tokenbucket.PerToken}}}
		dec, err := s.Acquire(ctx, p)
		if err != nil {
			t.Fatalf("%s: Acquire() = %v", cs.name, err)
		}
		if got := int64(dec.Statuses[0].Remaining/tokenbucket.PerToken) + 1; got != cs.want {
			t.Errorf("%s: Acquire(%q) capacity = %d tokens, want %d", cs.name, cs.key, got, cs.want)
		}
		if got := dec.Statuses[0].Bucket.Capacity / tokenbucket.PerToken; int64(got) != cs.want {
			t.Errorf("%s: Acquire(%q) reports the applied limit's capacity as %d tokens, want %d", cs.name, cs.key, got, cs.want)
		}
	}
	// A change is seen once the cache entry expires.
	set(admin.Scope{Entity: "e4", Resource: "r"}, 9)
	c.Advance(dynamo.DefaultConfigCacheTTL)
	p := &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e4", Resource: "r2"}, Limit: "rpm", Bucket: yaml, Amount: tokenbucket.PerToken}}}
	if dec, err := s.Acquire(ctx, p); err != nil || dec.Statuses[0].Remaining != 2*tokenbucket.PerToken {
		t.Errorf("Acquire(e4/r2) = %+v, %v, want the entity default (3 tokens, 2 left)", dec, err)
	}
	if err := adm.DeleteLimits(ctx, admin.Scope{System: true}); err != nil {
		t.Errorf("DeleteLimits(system) = %v", err)
	}
	if _, err := adm.Limits(ctx, admin.Scope{System: true}); err == nil {
		t.Errorf("Limits(system) after delete = nil error, want ErrNotFound")
	}
}

func TestParseLimit(t *testing.T) {
	cases := []struct {
		spec    string
		name    string
		cap, ra tokenbucket.Millitokens
		period  time.Duration
		bad     bool
	}{
		{spec: "rpm:100/min", name: "rpm", cap: 100000, ra: 100000, period: time.Minute},
		{spec: "rps:5", name: "rps", cap: 5000, ra: 5000, period: time.Second},
		{spec: "tpm:50000/min:80000", name: "tpm", cap: 80000000, ra: 50000000, period: time.Minute},
		{spec: "d:7/day", name: "d", cap: 7000, ra: 7000, period: 24 * time.Hour},
		{spec: "h:1/hour:1", name: "h", cap: 1000, ra: 1000, period: time.Hour},
		{spec: "rpm", bad: true},
		{spec: ":1/sec", bad: true},
		{spec: "x:0/sec", bad: true},
		{spec: "x:1/week", bad: true},
		{spec: "x:1/sec:y", bad: true},
		{spec: "x:-1", bad: true},
	}
	for _, c := range cases {
		name, l, err := admin.ParseLimit(c.spec)
		if c.bad {
			if err == nil {
				t.Errorf("ParseLimit(%q) = %v, nil, want an error", c.spec, l)
			}
			continue
		}
		if err != nil || name != c.name || l.Capacity != c.cap || l.RefillAmount != c.ra || l.RefillPeriod != c.period {
			t.Errorf("ParseLimit(%q) = %q, %+v, %v, want %q cap %d refill %d/%v", c.spec, name, l, err, c.name, c.cap, c.ra, c.period)
		}
		if back := admin.FormatLimit(name, l); back != c.spec && !(c.spec == "rps:5" && back == "rps:5/sec") && !(c.spec == "h:1/hour:1" && back == "h:1/hour") {
			t.Errorf("FormatLimit(ParseLimit(%q)) = %q", c.spec, back)
		}
	}
}
