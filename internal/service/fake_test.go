package service

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// t0 is the fake store's default clock, in unix milliseconds.
const t0 = int64(1_700_000_000_000)

// fakeStore is the reference store (storetest.Reference) on a settable
// clock, recording the plans it was asked and failing on demand.
type fakeStore struct {
	ref   *storetest.Reference
	clock *storetest.Clock
	mu    sync.Mutex
	err   error
	calls int
	plans []cascade.Plan
}

func newFakeStore() *fakeStore {
	c := storetest.NewClock(time.UnixMilli(t0))
	return &fakeStore{ref: storetest.NewReference(c.Now), clock: c}
}

func (f *fakeStore) Acquire(ctx context.Context, p *cascade.Plan) (cascade.Decision, error) {
	f.mu.Lock()
	f.calls++
	f.plans = append(f.plans, cascade.Plan{Debits: append([]cascade.Debit(nil), p.Debits...)})
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return cascade.Decision{}, err
	}
	return f.ref.Acquire(ctx, p)
}

// tokens returns the whole tokens of a stored bucket, or -1 if none.
func (f *fakeStore) tokens(entity, limit string) int64 {
	n, ok := f.ref.Tokens(func(k cascade.Key, l string) bool { return k.Entity == entity && l == limit })
	if !ok {
		return -1
	}
	return int64(n / tokenbucket.PerToken)
}

func (f *fakeStore) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fakeStore) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

var errDown = errors.New("fake: store down")

// testConfig is the descriptor configuration the tests run against.
const testConfig = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {tier: free}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {audit: shadow}
  - key: meta_a
    rate_limit: {unit: minute, requests_per_unit: 100}
    metadata: {route: {name: a, tier: gold}}
  - key: meta_b
    rate_limit: {unit: minute, requests_per_unit: 100}
    metadata: {route: {name: b, zone: eu}, tier: x}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {backend: b}
  - key: generic
    rate_limit: {name: generic, unit: minute, requests_per_unit: 1}
  - key: specific
    rate_limit:
      name: specific
      unit: minute
      requests_per_unit: 5
      replaces: [{name: generic}]
  - key: model
    limits:
      - {name: rpm, unit: minute, requests_per_unit: 5}
      - {name: tpd, unit: day, requests_per_unit: 2}
  - key: tokens
    limits:
      - {name: tpm, unit: minute, requests_per_unit: 100, charge: post}
  - key: window
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 6}
  - key: usage
    rate_limit: {unit: hour, requests_per_unit: 21}
  - key: usage_pre
    limits:
      - {name: tph, unit: hour, requests_per_unit: 21, charge: pre}
  - key: user_detail
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`

func mustConfig(t testing.TB, yaml string) *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "test.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	if err != nil {
		t.Fatalf("descriptors.Parse(test config) error = %v", err)
	}
	return cfg
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *rlv3.RateLimitDescriptor, hits uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

func negative(d *rlv3.RateLimitDescriptor, hits uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	d.IsNegativeHits = true
	return d
}

func rlReq(domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}
