package rlqs

import (
	"context"
	"errors"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reasons a stream is ended for, as Observer.StreamError counts them.
const (
	reasonNoDomain       = "no_domain"
	reasonUnknownDomain  = "unknown_domain"
	reasonChangedDomain  = "changed_domain"
	reasonNoBucket       = "empty_bucket_id"
	reasonTooManyKeys    = "too_many_keys"
	reasonTimeElapsed    = "invalid_time_elapsed"
	reasonZeroElapsed    = "zero_time_elapsed"
	reasonTooManyBuckets = "too_many_buckets"
	reasonStreamBytes    = "stream_bytes"
	reasonInvalidBucket  = "invalid_bucket"
)

// zeroElapsedGrace is how soon after its last report a bucket may report
// a time_elapsed of 0: Envoy counts it in whole seconds, so a bucket made
// less than a second before a report tick reports 0.
const zeroElapsedGrace = time.Second

type (
	reports  = rlqspb.RateLimitQuotaUsageReports
	usage    = rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	response = rlqspb.RateLimitQuotaResponse
)

// StreamRateLimitQuotas serves one Envoy's stream: each message reports
// the usage of some buckets and is answered by one message with an action
// for each of them (an assignment, or abandon for an idle bucket). A
// malformed message ends the stream with InvalidArgument (or
// ResourceExhausted past a bound) naming what is wrong.
func (s *Server) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[reports, response]) error {
	st := s.newStream()
	ctx := stream.Context()
	s.o.Observer.Streams(1)
	done := make(chan struct{})
	var pusher sync.WaitGroup
	pusher.Go(func() { st.outbox.pushLoop(ctx, done, stream.Send) })
	defer func() {
		close(done)
		pusher.Wait()
		st.close(ctx)
		s.o.Observer.Streams(-1)
	}()
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := st.handle(ctx, msg)
		if err != nil {
			return err
		}
		if len(resp.GetBucketAction()) == 0 {
			continue
		}
		if err := st.outbox.send(stream.Send, resp); err != nil {
			return err
		}
	}
}

// newStream is the state of a new stream.
func (s *Server) newStream() *streamState {
	return &streamState{s: s, watches: map[string]*watch{}, outbox: newOutbox()}
}

// streamState is what one stream holds: its domain and the buckets it
// watches, by key.
type streamState struct {
	s       *Server
	domain  string
	watches map[string]*watch
	bytes   int // of the watched buckets' ids
	outbox  *outbox
}

// watch is one bucket a stream watches.
type watch struct {
	key   string
	id    *rlqspb.BucketId
	bytes int
	// last is the bucket's last report, active its last report with
	// demand (or its subscription).
	last, active time.Time
	// stream is the watching stream; entry the bucket as this replica
	// pools it; rate the stream's demand rate in it (negative: unknown
	// yet). rate and grant, the last token bucket assigned (see steady),
	// are guarded by entry.mu.
	stream *streamState
	entry  *entry
	rate   float64
	grant  grant
}

// handle answers one message.
func (st *streamState) handle(ctx context.Context, msg *reports) (*response, error) {
	if err := st.checkDomain(msg.GetDomain()); err != nil {
		return nil, err
	}
	us := msg.GetBucketQuotaUsages()
	if len(us) > st.s.o.MaxBuckets {
		return nil, st.fail(codes.ResourceExhausted, reasonTooManyBuckets, "a report of "+strconv.Itoa(len(us))+" buckets; at most "+strconv.Itoa(st.s.o.MaxBuckets))
	}
	now := st.s.now()
	resp := &response{BucketAction: make([]*action, 0, len(us))}
	for i, u := range us {
		w, first, err := st.watchOf(i, u, now)
		if err != nil {
			return nil, err
		}
		a, err := st.assign(ctx, w, u, first, now)
		if err != nil {
			return nil, err
		}
		if a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	return resp, nil
}

// checkDomain takes the stream's domain from its first message: it must
// be one the configuration has. Later messages may repeat it (Envoy does)
// or leave it empty, and may not change it.
func (st *streamState) checkDomain(d string) error {
	if st.domain != "" {
		if d != "" && d != st.domain {
			return st.fail(codes.InvalidArgument, reasonChangedDomain, "domain "+strconv.Quote(d)+" after "+strconv.Quote(st.domain)+": a stream has one domain")
		}
		return nil
	}
	if d == "" {
		return st.fail(codes.InvalidArgument, reasonNoDomain, "the first message must name the domain")
	}
	cfg := st.s.o.Config()
	if cfg == nil {
		return status.Error(codes.Unavailable, "rlqs: no rate limit configuration loaded")
	}
	if !cfg.HasDomain(d) {
		return st.fail(codes.InvalidArgument, reasonUnknownDomain, "unknown domain "+strconv.Quote(d))
	}
	st.domain = d
	return nil
}

// watchOf validates usage i and returns the watch of its bucket,
// subscribing the stream to it on its first report (first).
func (st *streamState) watchOf(i int, u *usage, now time.Time) (*watch, bool, error) {
	o := &st.s.o
	b := u.GetBucketId().GetBucket()
	at := "bucket " + strconv.Itoa(i) + ": "
	switch {
	case len(b) == 0:
		return nil, false, st.fail(codes.InvalidArgument, reasonNoBucket, at+"bucket_id has no key")
	case len(b) > o.MaxKeys:
		return nil, false, st.fail(codes.InvalidArgument, reasonTooManyKeys, at+"bucket_id has "+strconv.Itoa(len(b))+" keys; at most "+strconv.Itoa(o.MaxKeys))
	}
	te := u.GetTimeElapsed()
	if te != nil && (te.CheckValid() != nil || te.AsDuration() < 0) {
		return nil, false, st.fail(codes.InvalidArgument, reasonTimeElapsed, at+"time_elapsed is negative or invalid")
	}
	key, size := bucketKey(b)
	if w := st.watches[key]; w != nil {
		if te.AsDuration() == 0 && now.Sub(w.last) >= zeroElapsedGrace {
			return nil, false, st.fail(codes.InvalidArgument, reasonZeroElapsed, at+"time_elapsed is 0, "+now.Sub(w.last).Round(time.Millisecond).String()+" after the bucket's last report")
		}
		return w, false, nil
	}
	if len(st.watches) >= o.MaxBuckets {
		return nil, false, st.fail(codes.ResourceExhausted, reasonTooManyBuckets, at+"the stream watches "+strconv.Itoa(len(st.watches))+" buckets; at most "+strconv.Itoa(o.MaxBuckets))
	}
	if st.bytes+size > o.MaxStreamBytes {
		return nil, false, st.fail(codes.ResourceExhausted, reasonStreamBytes, at+"the stream's bucket ids would hold "+strconv.Itoa(st.bytes+size)+" bytes; at most "+strconv.Itoa(o.MaxStreamBytes))
	}
	w := &watch{key: key, id: u.GetBucketId(), bytes: size, last: now, active: now, rate: -1, stream: st}
	st.watches[key] = w
	st.bytes += size
	w.entry = st.s.pool.join(st.domain+"\x00"+key, st.domain, w)
	o.Observer.Buckets(1)
	return w, true, nil
}

// drop ends the stream's watch of w.
func (st *streamState) drop(ctx context.Context, w *watch) {
	delete(st.watches, w.key)
	st.bytes -= w.bytes
	st.s.pool.leave(ctx, st.domain+"\x00"+w.key, w)
	st.outbox.forget(w)
	st.s.o.Observer.Buckets(-1)
}

// close drops every watch.
func (st *streamState) close(ctx context.Context) {
	for _, w := range st.watches {
		st.drop(ctx, w)
	}
}

// fail counts a malformed message and returns its stream error.
func (st *streamState) fail(code codes.Code, reason, msg string) error {
	st.s.o.Observer.StreamError(reason)
	st.s.o.Logger.WithField("reason", reason).WithField("domain", st.domain).Debug("rlqs stream refused: " + msg)
	return status.Error(code, "rlqs: "+msg)
}

// bucketKey is a bucket id's key, the same whatever the map's order, and
// the bytes of its keys and values.
func bucketKey(b map[string]string) (string, int) {
	keys := make([]string, 0, len(b))
	n := 0
	for k, v := range b {
		keys = append(keys, k)
		n += len(k) + len(v)
	}
	sort.Strings(keys)
	buf := make([]byte, 0, n+8*len(b))
	for _, k := range keys {
		buf = strconv.AppendInt(buf, int64(len(k)), 10)
		buf = append(buf, ':')
		buf = append(buf, k...)
		v := b[k]
		buf = strconv.AppendInt(buf, int64(len(v)), 10)
		buf = append(buf, ':')
		buf = append(buf, v...)
	}
	return string(buf), n
}

// demandOf is a report's demand, allowed and denied, saturating.
func demandOf(u *usage) uint64 {
	a, d := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
	if a > math.MaxUint64-d {
		return math.MaxUint64
	}
	return a + d
}
