package rlqs

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

var transports = []string{"grpc-go", "native"}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func tenant(t, path string) map[string]string { return map[string]string{"tenant": t, "path": path} }

// TestStreamAssigns: the first report of a bucket subscribes the stream
// and is answered at once with a token bucket of the whole limit (the
// only stream); later reports are answered too; a rule of 0 denies all,
// an unlimited rule and an unmatched bucket allow all.
func TestStreamAssigns(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			r := newRig(t, testYAML, Options{})
			clock := newClock()
			r.srv.now = clock.now
			st := openStream(t, r.dial(t, tr))
			send := func(m *reports) *rlqspb.RateLimitQuotaResponse {
				t.Helper()
				if err := st.Send(m); err != nil {
					t.Fatal(err)
				}
				resp, err := st.Recv()
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			a := send(report("edge", tenant("a", "/x"), 1, 0, 0)).GetBucketAction()[0]
			tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
			if tb.GetTokensPerFill().GetValue() != 100 || tb.GetFillInterval().AsDuration() != time.Second || tb.GetMaxTokens() != 100 {
				t.Errorf("first assignment %v, want 100 tokens a second", tb)
			}
			if ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != DefaultTTL {
				t.Errorf("ttl %v", ttl)
			}
			if a.GetBucketId().GetBucket()["tenant"] != "a" {
				t.Errorf("bucket id not echoed: %v", a.GetBucketId())
			}
			clock.add(5 * time.Second)
			a = send(report("edge", tenant("a", "/x"), 50, 450, 5*time.Second)).GetBucketAction()[0]
			if got := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue(); got != 100 {
				t.Errorf("sole stream gets %d a fill, want 100", got)
			}
			for _, c := range []struct {
				bucket map[string]string
				want   typev3.RateLimitStrategy_BlanketRule
			}{
				{map[string]string{"banned": "x"}, typev3.RateLimitStrategy_DENY_ALL},
				{map[string]string{"free": "x"}, typev3.RateLimitStrategy_ALLOW_ALL},
				{map[string]string{"nothing": "x"}, typev3.RateLimitStrategy_ALLOW_ALL},
			} {
				a := send(report("", c.bucket, 1, 0, 0)).GetBucketAction()[0]
				s := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
				if _, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok || s.GetBlanketRule() != c.want {
					t.Errorf("%v: %v, want %v", c.bucket, s, c.want)
				}
			}
		})
	}
}

// TestHostileStreams: every malformed message ends its stream with a
// clear error, on both transports, and the server forgets the stream.
func TestHostileStreams(t *testing.T) {
	huge := map[string]string{}
	for i := range 10_000 {
		huge["k"+strconv.Itoa(i)] = "v"
	}
	cases := []struct {
		name   string
		msgs   []*reports
		tick   time.Duration // between messages
		code   codes.Code
		reason string
	}{
		{"unknown domain", []*reports{report("nope", tenant("a", "/"), 1, 0, 0)}, 0, codes.InvalidArgument, reasonUnknownDomain},
		{"no domain", []*reports{report("", tenant("a", "/"), 1, 0, 0)}, 0, codes.InvalidArgument, reasonNoDomain},
		{"changed domain", []*reports{report("edge", tenant("a", "/"), 1, 0, 0), report("other", tenant("a", "/"), 1, 0, time.Second)}, time.Second, codes.InvalidArgument, reasonChangedDomain},
		{"10,000 keys", []*reports{report("edge", huge, 1, 0, 0)}, 0, codes.InvalidArgument, reasonTooManyKeys},
		{"empty bucket id", []*reports{report("edge", map[string]string{}, 1, 0, 0)}, 0, codes.InvalidArgument, reasonNoBucket},
		{"time_elapsed 0", []*reports{report("edge", tenant("a", "/"), 1, 0, 0), report("edge", tenant("a", "/"), 5, 0, 0)}, 5 * time.Second, codes.InvalidArgument, reasonZeroElapsed},
		{"negative time_elapsed", []*reports{report("edge", tenant("a", "/"), 1, 0, -time.Second)}, 0, codes.InvalidArgument, reasonTimeElapsed},
		{"value too long", []*reports{report("edge", tenant(strings.Repeat("x", 10_000), "/"), 1, 0, 0)}, 0, codes.InvalidArgument, reasonInvalidBucket},
	}
	for _, tr := range transports {
		for _, c := range cases {
			t.Run(tr+"/"+c.name, func(t *testing.T) {
				r := newRig(t, testYAML, Options{})
				clock := newClock()
				r.srv.now = clock.now
				st := openStream(t, r.dial(t, tr))
				var err error
				for i, m := range c.msgs {
					if i > 0 {
						clock.add(c.tick)
					}
					if err = st.Send(m); err != nil {
						break
					}
					if _, err = st.Recv(); err != nil {
						break
					}
				}
				if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), "rlqs: ") {
					t.Fatalf("got %v, want %v", err, c.code)
				}
				if n := r.obs.errorCount(c.reason); n != 1 {
					t.Errorf("reason %s counted %d times", c.reason, n)
				}
				waitFor(t, func() bool { return r.obs.gauges() == [2]int{0, 0} })
			})
		}
	}
}

// TestZeroElapsedWithinASecond: Envoy counts time_elapsed in whole
// seconds, so a bucket reported again within a second may say 0.
func TestZeroElapsedWithinASecond(t *testing.T) {
	r := newRig(t, testYAML, Options{})
	clock := newClock()
	r.srv.now = clock.now
	st := openStream(t, r.dial(t, "native"))
	for _, m := range []*reports{report("edge", tenant("a", "/"), 1, 0, 0), report("edge", tenant("a", "/"), 3, 0, 0)} {
		clock.add(500 * time.Millisecond)
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamBounds: a stream past its buckets or bytes ends
// ResourceExhausted; a report of more buckets than a stream may watch too.
func TestStreamBounds(t *testing.T) {
	r := newRig(t, testYAML, Options{MaxBuckets: 3, MaxStreamBytes: 64})
	c := r.dial(t, "native")
	st := openStream(t, c)
	var err error
	for i := 0; err == nil && i < 10; i++ {
		if err = st.Send(report("edge", tenant(strconv.Itoa(i), "/"), 1, 0, 0)); err == nil {
			_, err = st.Recv()
		}
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want ResourceExhausted", err)
	}
	st = openStream(t, c)
	m := &reports{Domain: "edge"}
	for i := range 4 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &usage{BucketId: &rlqspb.BucketId{Bucket: tenant(strconv.Itoa(i), "/")}, TimeElapsed: durationpb.New(0)})
	}
	if err = st.Send(m); err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || r.obs.errorCount(reasonTooManyBuckets) != 2 {
		t.Fatalf("got %v (%d), want ResourceExhausted", err, r.obs.errorCount(reasonTooManyBuckets))
	}
}

func (o *countObserver) gauges() [2]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return [2]int{o.streams, o.buckets}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
