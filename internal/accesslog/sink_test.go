package accesslog_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/dynalimit/dynalimit/internal/accesslog"
	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

const config = `
domain: llm
adjustments:
  - limit: tpm
    cost: {header: x-llm-tokens}
  - limit: tpd
    cost: {trailer: x-llm-tokens}
  - limit: out
    cost: {metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}
descriptors:
  - key: api_key
    limits:
      - {name: tpm, unit: minute, requests_per_unit: 100000}
      - {name: tpd, unit: day, requests_per_unit: 1000000}
      - {name: out, unit: minute, requests_per_unit: 100000}
`

// settler records settlements, once per ID.
type settler struct {
	mu      sync.Mutex
	applied map[string]cascade.Settlement
	calls   int
}

func (s *settler) Settle(_ context.Context, st *cascade.Settlement) (cascade.Settled, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if _, dup := s.applied[st.ID]; dup {
		return cascade.Settled{Duplicate: true}, nil
	}
	s.applied[st.ID] = *st
	return cascade.Settled{}, nil
}

func (s *settler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.applied)
}

type rig struct {
	sink     *accesslog.Sink
	st       *settler
	keys     *lease.Keyring
	reg      *prometheus.Registry
	now      time.Time
	adjuster *adjust.Adjuster
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return rigOf(t, config)
}

// rigOf is a sink over the descriptor configuration yaml.
func rigOf(t *testing.T, yaml string) *rig {
	t.Helper()
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "llm.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := lease.NewKeyring([]byte("the current key, thirty-two bytes+"), []byte("the previous key, thirty-two bytes"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{st: &settler{applied: map[string]cascade.Settlement{}}, keys: k, reg: prometheus.NewRegistry(), now: time.Unix(1_800_000_000, 0)}
	m := metrics.New(r.reg)
	r.adjuster = adjust.New(adjust.Options{Settler: r.st, Keys: func() *lease.Keyring { return k }, Metrics: m, Now: func() time.Time { return r.now }})
	t.Cleanup(r.adjuster.Close)
	r.sink = accesslog.New(r.adjuster, func() *descriptors.Config { return cfg }, m, nil)
	return r
}

var shape, _ = tokenbucket.Rate(100000, time.Minute, 0)

// token signs a lease of limit on one bucket with an estimate of 500.
func (r *rig) token(t *testing.T, keys *lease.Keyring, limits ...string) string {
	t.Helper()
	l := &lease.Lease{ID: lease.NewID(), Domain: "llm", Expires: r.now.Add(time.Minute)}
	b := lease.Bucket{Key: cascade.Key{Namespace: "default", Entity: "k1", Resource: "llm"}}
	for _, name := range limits {
		b.Limits = append(b.Limits, lease.Limit{Name: name, Bucket: shape, Estimate: 500 * tokenbucket.PerToken})
	}
	l.Buckets = []lease.Bucket{b}
	tok, err := keys.Sign(l)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func entry(token string, headers, trailers map[string]string, meta map[string]*structpb.Struct) *datav3.HTTPAccessLogEntry {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	for k, v := range meta {
		md.FilterMetadata[k] = v
	}
	if token != "" {
		md.FilterMetadata[accesslog.MetadataNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{accesslog.LeaseField: structpb.NewStringValue(token)}}
	}
	return &datav3.HTTPAccessLogEntry{
		CommonProperties: &datav3.AccessLogCommon{Metadata: md},
		Response:         &datav3.HTTPResponseProperties{ResponseHeaders: headers, ResponseTrailers: trailers},
	}
}

func tokens(n float64) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{"llm_total_token": structpb.NewNumberValue(n)}}
}

func TestEntriesSettleFromEverySource(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		e      *datav3.HTTPAccessLogEntry
		want   string
		amount tokenbucket.Millitokens
		op     cascade.Op
	}{
		{"header", entry(r.token(t, r.keys, "tpm"), map[string]string{"x-llm-tokens": "2000"}, nil, nil), metrics.AdjustApplied, 1500 * tokenbucket.PerToken, cascade.Charge},
		{"header in another case", entry(r.token(t, r.keys, "tpm"), map[string]string{"X-LLM-Tokens": "100"}, nil, nil), metrics.AdjustApplied, 400 * tokenbucket.PerToken, cascade.Refund},
		{"trailer", entry(r.token(t, r.keys, "tpd"), nil, map[string]string{"x-llm-tokens": "900"}, nil), metrics.AdjustApplied, 400 * tokenbucket.PerToken, cascade.Charge},
		{"metadata number", entry(r.token(t, r.keys, "out"), nil, nil, map[string]*structpb.Struct{"io.envoy.ai_gateway": tokens(1000)}), metrics.AdjustApplied, 500 * tokenbucket.PerToken, cascade.Charge},
		{"no lease", entry("", map[string]string{"x-llm-tokens": "2000"}, nil, nil), accesslog.ReasonNoLease, 0, 0},
		{"no cost", entry(r.token(t, r.keys, "tpm"), nil, nil, nil), accesslog.ReasonNoCost, 0, 0},
		{"bad cost", entry(r.token(t, r.keys, "tpm"), map[string]string{"x-llm-tokens": "12.5"}, nil, nil), accesslog.ReasonBadCost, 0, 0},
		{"negative metadata", entry(r.token(t, r.keys, "out"), nil, nil, map[string]*structpb.Struct{"io.envoy.ai_gateway": tokens(-3)}), accesslog.ReasonBadCost, 0, 0},
	}
	for _, tc := range cases {
		before := r.st.count()
		if got := r.sink.Settle(ctx, tc.e); got != tc.want {
			t.Errorf("%s: result %q, want %q", tc.name, got, tc.want)
			continue
		}
		if tc.want != metrics.AdjustApplied {
			if r.st.count() != before {
				t.Errorf("%s: an ignored entry settled", tc.name)
			}
			continue
		}
		tok := tc.e.GetCommonProperties().GetMetadata().GetFilterMetadata()[accesslog.MetadataNamespace].GetFields()[accesslog.LeaseField].GetStringValue()
		l, _ := r.keys.Verify(tok, r.now)
		got := r.st.applied[l.ID]
		if len(got.Debits) != 1 || got.Debits[0].Amount != tc.amount || got.Debits[0].Op != tc.op {
			t.Errorf("%s: settlement %+v, want %s of %d", tc.name, got.Debits, tc.op, tc.amount)
		}
	}
	for reason, want := range map[string]float64{accesslog.ReasonNoLease: 1, accesslog.ReasonNoCost: 1, accesslog.ReasonBadCost: 2} {
		if got := testutil.CounterValue(t, r.reg, "ratelimit_access_log_entries_ignored_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("ignored %s = %v, want %v", reason, got, want)
		}
	}
}

func TestLeasesThatDoNotVerifyMoveNothing(t *testing.T) {
	r := newRig(t)
	foreign, _ := lease.NewKeyring([]byte("a key this fleet never had, 32 bytes"))
	previous, _ := lease.NewKeyring([]byte("the previous key, thirty-two bytes"))
	cost := map[string]string{"x-llm-tokens": "2000"}
	good := r.token(t, r.keys, "tpm")
	tampered := []byte(good)
	i := len(tampered) / 2
	tampered[i] = map[bool]byte{true: 'B', false: 'A'}[tampered[i] == 'A']
	expired := r.token(t, r.keys, "tpm")

	ctx := context.Background()
	for name, tc := range map[string]struct{ token, want string }{
		"unknown key": {r.token(t, foreign, "tpm"), "unknown_key"},
		"tampered":    {string(tampered), "bad_signature"},
		"not a lease": {"hello", "malformed"},
	} {
		if got := r.sink.Settle(ctx, entry(tc.token, cost, nil, nil)); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
	// During a rotation, a lease the previous key signed still settles.
	if got := r.sink.Settle(ctx, entry(r.token(t, previous, "tpm"), cost, nil, nil)); got != metrics.AdjustApplied {
		t.Errorf("previous key: %q, want applied", got)
	}
	r.now = r.now.Add(2 * time.Minute)
	if got := r.sink.Settle(ctx, entry(expired, cost, nil, nil)); got != "expired" {
		t.Errorf("expired: %q", got)
	}
	if r.st.count() != 1 {
		t.Errorf("%d settlements, want only the previous key's", r.st.count())
	}
}

// serve runs the sink on a gRPC server and returns a client.
func serve(t *testing.T, s *accesslog.Sink) alsv3.AccessLogServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	s.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return alsv3.NewAccessLogServiceClient(cc)
}

func batch(es ...*datav3.HTTPAccessLogEntry) *alsv3.StreamAccessLogsMessage {
	return &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: es}}}
}

func TestStreamCutAndResentSettlesOnce(t *testing.T) {
	r := newRig(t)
	client := serve(t, r.sink)
	cost := map[string]string{"x-llm-tokens": "2000"}
	var first, second []*datav3.HTTPAccessLogEntry
	for range 100 {
		first = append(first, entry(r.token(t, r.keys, "tpm"), cost, nil, nil))
		second = append(second, entry(r.token(t, r.keys, "tpm"), cost, nil, nil))
	}
	// A stream that delivers one batch and is cut before its second.
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.StreamAccessLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(batch(first...)); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(5*time.Second, func() bool { return r.st.count() == 100 }) {
		t.Fatalf("%d of the first batch settled", r.st.count())
	}
	cancel()
	// Envoy's next stream sends both batches (the first again).
	stream, err = client.StreamAccessLogs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]*datav3.HTTPAccessLogEntry{first, second} {
		if err := stream.Send(batch(b...)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if n := r.st.count(); n != 200 {
		t.Fatalf("%d settlements, want 200", n)
	}
	dup := testutil.CounterValue(t, r.reg, "ratelimit_adjustments_total", map[string]string{"path": metrics.PathAccessLog, "result": metrics.AdjustDuplicate})
	if dup != 100 {
		t.Errorf("duplicates = %v, want 100", dup)
	}
	if !testutil.Eventually(5*time.Second, func() bool {
		return testutil.CounterValue(t, r.reg, "ratelimit_access_log_streams", nil) == 0
	}) {
		t.Errorf("streams open = %v after both closed", testutil.CounterValue(t, r.reg, "ratelimit_access_log_streams", nil))
	}
}

// blocking is a store that holds every settlement until released, and
// records how many it held at once.
type blocking struct {
	release chan struct{}
	now     atomic.Int64
	most    atomic.Int64
}

func (b *blocking) Settle(context.Context, *cascade.Settlement) (cascade.Settled, error) {
	n := b.now.Add(1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	<-b.release
	b.now.Add(-1)
	return cascade.Settled{}, nil
}

// TestStreamSettlesAtMostMaxInFlight: a stream whose store holds every
// settlement has at most MaxInFlight of them open; the rest wait for one
// to end.
func TestStreamSettlesAtMostMaxInFlight(t *testing.T) {
	r := newRig(t)
	st := &blocking{release: make(chan struct{})}
	a := adjust.New(adjust.Options{Settler: st, Keys: func() *lease.Keyring { return r.keys }, Now: func() time.Time { return r.now }})
	t.Cleanup(a.Close)
	cfg, _ := descriptors.Parse([]descriptors.File{{Name: "llm.yaml", Data: []byte(config)}}, descriptors.Options{})
	client := serve(t, accesslog.New(a, func() *descriptors.Config { return cfg }, nil, nil))
	var es []*datav3.HTTPAccessLogEntry
	for range 2 * accesslog.MaxInFlight {
		es = append(es, entry(r.token(t, r.keys, "tpm"), map[string]string{"x-llm-tokens": "600"}, nil, nil))
	}
	stream, err := client.StreamAccessLogs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(batch(es...)); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(5*time.Second, func() bool { return st.now.Load() == accesslog.MaxInFlight }) {
		t.Fatalf("%d settlements open, want %d", st.now.Load(), accesslog.MaxInFlight)
	}
	time.Sleep(50 * time.Millisecond)
	if n := st.most.Load(); n != accesslog.MaxInFlight {
		t.Errorf("%d settlements open at once, want at most %d", n, accesslog.MaxInFlight)
	}
	close(st.release)
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}
