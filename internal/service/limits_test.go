package service

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// rawMsg is a request already in wire format, sent as it is by rawCodec.
type rawMsg struct{ b []byte }

// rawCodec is a client codec that sends rawMsg bytes unchanged (a real
// client could send any bytes; Go's proto.Marshal refuses invalid UTF-8).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawMsg); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
	}
	return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
}

func (rawCodec) Name() string { return grpcproto.Name }

// callRaw sends b as a ShouldRateLimit request over conn.
func callRaw(ctx context.Context, conn *grpc.ClientConn, b []byte) (*pb.RateLimitResponse, error) {
	var resp pb.RateLimitResponse
	err := conn.Invoke(ctx, pb.RateLimitService_ShouldRateLimit_FullMethodName, &rawMsg{b}, &resp, grpc.ForceCodecV2(rawCodec{}))
	return &resp, err
}

// wireRequest encodes a request by hand, so that strings may hold any bytes.
func wireRequest(domain string, descs ...[][2]string) []byte {
	var b []byte
	b = protowire.AppendTag(b, fieldRequestDomain, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, d := range descs {
		var db []byte
		for _, e := range d {
			var eb []byte
			eb = protowire.AppendTag(eb, fieldEntryKey, protowire.BytesType)
			eb = protowire.AppendString(eb, e[0])
			eb = protowire.AppendTag(eb, fieldEntryValue, protowire.BytesType)
			eb = protowire.AppendString(eb, e[1])
			db = protowire.AppendTag(db, fieldDescriptorEntries, protowire.BytesType)
			db = protowire.AppendBytes(db, eb)
		}
		b = protowire.AppendTag(b, fieldRequestDescriptors, protowire.BytesType)
		b = protowire.AppendBytes(b, db)
	}
	return b
}

func entries(n int) [][2]string {
	es := make([][2]string, n)
	for i := range es {
		es[i] = [2]string{"user", "x"}
	}
	return es
}

func repeat(n int, d [][2]string) [][][2]string {
	ds := make([][][2]string, n)
	for i := range ds {
		ds[i] = d
	}
	return ds
}

// TestRequestLimits sends requests at and past each bound, decoded (as the
// JSON endpoint and direct callers do) and as wire bytes through gRPC: both
// answer the same InvalidArgument, count it under the same reason, and
// never reach the store.
func TestRequestLimits(t *testing.T) {
	limits := RequestLimits{Descriptors: 4, Entries: 3, EntryBytes: 8}
	one := [][2]string{{"user", "x"}}
	tests := []struct {
		name       string
		req        []byte
		wantReason string // "" means admitted
		wantMsg    string
	}{
		{"at every bound", wireRequest("api", repeat(4, [][2]string{{"user", "12345678"}, {"a", "b"}, {"c", "d"}})...), "", ""},
		{"too many descriptors", wireRequest("api", repeat(5, one)...), reasonTooManyDescs, "request has more than 4 descriptors"},
		{"far too many descriptors", wireRequest("api", repeat(60000, one)...), reasonTooManyDescs, "request has more than 4 descriptors"},
		{"too many entries", wireRequest("api", one, entries(4)), reasonTooManyEntries, "descriptor 1 has more than 3 entries"},
		{"value too long", wireRequest("api", [][2]string{{"user", "123456789"}}), reasonTooLong, "descriptor 0 entry 0 value is longer than 8 bytes"},
		{"key too long", wireRequest("api", [][2]string{{"123456789", "x"}}), reasonTooLong, "descriptor 0 entry 0 key is longer than 8 bytes"},
		{"domain too long", wireRequest("api456789", one), reasonTooLong, "domain is longer than 8 bytes"},
		{"invalid UTF-8 in a value", wireRequest("api", [][2]string{{"user", "a\xffb"}}), reasonUTF8, "descriptor 0 entry 0 value is not valid UTF-8"},
		{"invalid UTF-8 in a key", wireRequest("api", one, [][2]string{{"us\xc3", "x"}}), reasonUTF8, "descriptor 1 entry 0 key is not valid UTF-8"},
		{"invalid UTF-8 in the domain", wireRequest("\xed\xa0\x80", one), reasonUTF8, "domain is not valid UTF-8"},
		{"truncated bytes", wireRequest("api", one)[:9], reasonMalformed, "decode request"},
	}
	cfg := mustConfig(t, testConfig)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			reg := prometheus.NewRegistry()
			svc := New(st, func() *descriptors.Config { return cfg }, WithRequestLimits(limits), WithMetrics(metrics.New(reg)))
			conn := dialBufconn(t, svc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			// Over gRPC, from the wire bytes.
			_, grpcErr := callRaw(ctx, conn, tt.req)
			// Decoded, where the bytes decode (Go's decoder refuses
			// invalid UTF-8 itself).
			var req pb.RateLimitRequest
			decoded := proto.Unmarshal(tt.req, &req) == nil
			var directErr error
			if decoded {
				_, directErr = svc.ShouldRateLimit(ctx, &req)
			}

			wantCount := 0.0
			if tt.wantReason == "" {
				if grpcErr != nil || directErr != nil {
					t.Fatalf("ShouldRateLimit() errors = %v (gRPC), %v (decoded), want nil", grpcErr, directErr)
				}
			} else {
				check := func(via string, got error) {
					if status.Code(got) != codes.InvalidArgument || !strings.Contains(status.Convert(got).Message(), tt.wantMsg) {
						t.Errorf("ShouldRateLimit(%s) error = %v, want InvalidArgument containing %q", via, got, tt.wantMsg)
					}
				}
				check("over gRPC", grpcErr)
				wantCount = 1
				if decoded {
					check("decoded", directErr)
					wantCount = 2
				}
				if st.callCount() != 0 {
					t.Errorf("store calls = %d, want 0", st.callCount())
				}
			}
			if tt.wantReason != "" {
				if got := counterValue(t, reg, "ratelimit_invalid_requests_total", map[string]string{"reason": tt.wantReason}); got != wantCount {
					t.Errorf("invalid requests {reason=%q} = %v, want %v", tt.wantReason, got, wantCount)
				}
			}
		})
	}
}

// TestDefaultRequestLimits pins the defaults: 256 descriptors of 64 entries
// of 8 KiB values pass, one more of each does not.
func TestDefaultRequestLimits(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	svc := New(admitStore{}, func() *descriptors.Config { return cfg })
	long := strings.Repeat("v", DefaultMaxEntryBytes)
	at := &pb.RateLimitRequest{Domain: "api"}
	for range DefaultMaxDescriptors {
		at.Descriptors = append(at.Descriptors, desc("user", long))
	}
	for range DefaultMaxEntries - 1 {
		at.Descriptors[0].Entries = append(at.Descriptors[0].Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	if _, err := svc.ShouldRateLimit(context.Background(), at); err != nil {
		t.Fatalf("ShouldRateLimit(at the default limits) error = %v", err)
	}
	past := []func(r *pb.RateLimitRequest){
		func(r *pb.RateLimitRequest) { r.Descriptors = append(r.Descriptors, desc("user", "x")) },
		func(r *pb.RateLimitRequest) {
			r.Descriptors[0].Entries = append(r.Descriptors[0].Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
		},
		func(r *pb.RateLimitRequest) { r.Descriptors[1].Entries[0].Value += "v" },
	}
	for i, f := range past {
		r := proto.Clone(at).(*pb.RateLimitRequest)
		f(r)
		if _, err := svc.ShouldRateLimit(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("case %d: ShouldRateLimit(past a default limit) error = %v, want InvalidArgument", i, err)
		}
	}
}

// TestHugeRequestIsRefusedFast checks that a request with 60,000
// descriptors is refused over gRPC well inside Envoy's 20 ms timeout (the
// benchmark BenchmarkHugeRequest measures it).
func TestHugeRequestIsRefusedFast(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	conn := dialBufconn(t, New(admitStore{}, func() *descriptors.Config { return cfg }))
	huge := wireRequest("api", repeat(60000, [][2]string{{"user", "x"}})...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	best := time.Hour
	for range 5 {
		start := time.Now()
		_, err := callRaw(ctx, conn, huge)
		best = min(best, time.Since(start))
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("ShouldRateLimit(60,000 descriptors) error = %v, want InvalidArgument", err)
		}
	}
	if best > 100*time.Millisecond { // generous: the race detector and a shared machine
		t.Errorf("ShouldRateLimit(60,000 descriptors) took %v at best, want well under 100ms", best)
	}
}

// resetStore answers every debit with the retry-after and reset it holds,
// admitted or refused.
type resetStore struct {
	ok           bool
	retry, reset time.Duration
}

func (r resetStore) Acquire(_ context.Context, p *cascade.Plan) (cascade.Decision, error) {
	dec := cascade.Decision{Admitted: r.ok, Statuses: make([]cascade.Status, len(p.Debits))}
	for i := range dec.Statuses {
		dec.Statuses[i] = cascade.Status{OK: r.ok, RetryAfter: r.retry, ResetAfter: r.reset}
	}
	return dec, nil
}

// FuzzResetHeader: whatever durations a store reports (a large hits value
// makes retry-after near the largest Duration), the reset header is the
// duration in whole seconds rounded up, and never negative.
func FuzzResetHeader(f *testing.F) {
	f.Add(false, int64(1<<63-1), int64(1<<63-1))
	f.Add(false, int64(1<<63-1-999_999_999), int64(0))
	f.Add(true, int64(0), int64(20*time.Second+1))
	f.Add(false, int64(-1), int64(-5))
	cfg := mustConfig(f, testConfig)
	f.Fuzz(func(t *testing.T, ok bool, retry, reset int64) {
		st := resetStore{ok: ok, retry: time.Duration(retry), reset: time.Duration(reset)}
		svc := New(st, func() *descriptors.Config { return cfg }, WithResponseHeaders(true, "", "", ""))
		resp, err := svc.ShouldRateLimit(context.Background(), rlReq("api", desc("user", "u")))
		if err != nil {
			t.Fatalf("ShouldRateLimit() error = %v", err)
		}
		d := st.reset
		if !ok {
			d = st.retry
		}
		want := int64(0)
		if d > 0 {
			want = int64(d / time.Second)
			if d%time.Second != 0 {
				want++
			}
		}
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() != DefaultResetHeader {
				continue
			}
			if h.GetValue() != strconv.FormatInt(want, 10) || strings.HasPrefix(h.GetValue(), "-") {
				t.Fatalf("%s = %s for a duration of %v, want %d", DefaultResetHeader, h.GetValue(), d, want)
			}
			return
		}
		t.Fatalf("no %s header in %v", DefaultResetHeader, resp.GetResponseHeadersToAdd())
	})
}

// TestProblemPastTheFirstBuffer: a problem far into a large request (past
// the first buffer the codec scans) is still found, with the same message.
func TestProblemPastTheFirstBuffer(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	conn := dialBufconn(t, New(admitStore{}, func() *descriptors.Config { return cfg }))
	ds := repeat(200, [][2]string{{"user", strings.Repeat("v", 400)}})
	ds = append(ds, [][2]string{{"user", "bad\xff"}})
	req := wireRequest("api", ds...)
	if len(req) < 64<<10 {
		t.Fatalf("request of %d bytes, want more than one 16 KiB frame", len(req))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := callRaw(ctx, conn, req)
	if want := "descriptor 200 entry 0 value is not valid UTF-8"; status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Errorf("ShouldRateLimit(large request, bad last value) error = %v, want InvalidArgument containing %q", err, want)
	}
}
