package accesslog

import (
	"context"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// Where the lease is in an entry's metadata.
const (
	// MetadataNamespace is the filter-metadata namespace Envoy's rate-limit
	// filter keeps the service's dynamic metadata under.
	MetadataNamespace = "envoy.filters.http.ratelimit"
	// LeaseField is the lease's field there (service.LeaseKey).
	LeaseField = "dynalimit.lease"
)

// MaxInFlight bounds the entries one stream settles at once.
const MaxInFlight = 64

// MaxCost bounds a reported cost, in whole tokens (as a request's hits).
const MaxCost = 1_000_000_000_000

// Reasons an entry settles nothing (ratelimit_access_log_entries_ignored_total).
const (
	ReasonNoLease = "no_lease"
	ReasonNoCost  = "no_cost"
	ReasonBadCost = "bad_cost"
	ReasonNotHTTP = "not_http"
)

// Sink is the access-log service. Build it with New.
type Sink struct {
	alsv3.UnimplementedAccessLogServiceServer
	adjust  *adjust.Adjuster
	config  func() *descriptors.Config
	metrics *metrics.Metrics
	log     *logrus.Entry
}

// New returns a sink settling through a, with the adjustments of the
// configuration config returns (loaded once per entry; nil: none loaded,
// every entry keeps its estimate).
func New(a *adjust.Adjuster, config func() *descriptors.Config, m *metrics.Metrics, log *logrus.Entry) *Sink {
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	return &Sink{adjust: a, config: config, metrics: m, log: log.WithField("component", "accesslog")}
}

// Register registers s on gs as envoy.service.accesslog.v3.AccessLogService.
func (s *Sink) Register(gs grpc.ServiceRegistrar) { alsv3.RegisterAccessLogServiceServer(gs, s) }

// StreamAccessLogs reads one stream of entries until Envoy closes it,
// settling each HTTP entry, and answers when every entry read is settled.
func (s *Sink) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	s.metrics.AccessLogStream(1)
	defer s.metrics.AccessLogStream(-1)
	ctx := stream.Context()
	sem := make(chan struct{}, MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			wg.Wait()
			return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
		}
		if err != nil {
			return err
		}
		if tcp := msg.GetTcpLogs(); tcp != nil {
			n := len(tcp.GetLogEntry())
			s.metrics.AccessLogEntries(n)
			for range n {
				s.metrics.EntryIgnored(ReasonNotHTTP)
			}
			continue
		}
		entries := msg.GetHttpLogs().GetLogEntry()
		s.metrics.AccessLogEntries(len(entries))
		for _, e := range entries {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				// The settlement outlives the stream: an entry read is an
				// entry settled, even when Envoy cuts the stream next.
				s.Settle(context.WithoutCancel(ctx), e)
			}()
		}
	}
}

// Settle settles one entry and returns the result: metrics.AdjustApplied
// or metrics.AdjustDuplicate, "" when the store did not answer (the
// adjuster retries), or the reason it settled nothing.
func (s *Sink) Settle(ctx context.Context, e *datav3.HTTPAccessLogEntry) string {
	token := leaseToken(e.GetCommonProperties().GetMetadata())
	if token == "" {
		s.metrics.EntryIgnored(ReasonNoLease)
		return ReasonNoLease
	}
	l, err := s.adjust.Open(metrics.PathAccessLog, token)
	if err != nil {
		reason := lease.Reason(err)
		s.metrics.EntryIgnored(reason)
		return reason
	}
	var adjs []descriptors.Adjustment
	if cfg := s.config(); cfg != nil {
		adjs = cfg.Adjustments(l.Domain)
	}
	bad := false
	cost := func(limit string) adjust.Report {
		for i := range adjs {
			if adjs[i].Limit == limit {
				r, wrong := reportOf(e, &adjs[i])
				bad = bad || wrong
				return r
			}
		}
		return adjust.Report{}
	}
	res, err := s.adjust.Settle(ctx, metrics.PathAccessLog, l, cost)
	if errors.Is(err, adjust.ErrNoCost) {
		reason := ReasonNoCost
		if bad {
			reason = ReasonBadCost
		}
		s.metrics.EntryIgnored(reason)
		return reason
	}
	return res
}

// leaseToken returns the lease in an entry's metadata, "" when none.
func leaseToken(md *corev3.Metadata) string {
	return md.GetFilterMetadata()[MetadataNamespace].GetFields()[LeaseField].GetStringValue()
}

// reportOf reads what an entry reports for adjustment a: a count, or for
// a money limit's adjustment its input and output tokens, both present and
// whole (a report of one alone is none: the estimate stands). bad is set
// when a field is there and not a whole number of tokens.
func reportOf(e *datav3.HTTPAccessLogEntry, a *descriptors.Adjustment) (r adjust.Report, bad bool) {
	if !a.Split() {
		v, found, ok := costOf(e, a.Cost)
		return adjust.Report{Tokens: v, Counted: found && ok}, found && !ok
	}
	in, inFound, inOK := costOf(e, a.Input)
	out, outFound, outOK := costOf(e, a.Output)
	bad = (inFound && !inOK) || (outFound && !outOK)
	return adjust.Report{In: in, Out: out, Split: inFound && outFound && !bad}, bad
}

// costOf reads the cost an entry reports at src: found when the entry
// carries the field, ok when it is a whole number of tokens in range.
func costOf(e *datav3.HTTPAccessLogEntry, src descriptors.CostSource) (v uint64, found, ok bool) {
	switch {
	case src.Header != "":
		s, has := lookup(e.GetResponse().GetResponseHeaders(), src.Header)
		if !has {
			return 0, false, false
		}
		v, ok = parseCost(s)
		return v, true, ok
	case src.Trailer != "":
		s, has := lookup(e.GetResponse().GetResponseTrailers(), src.Trailer)
		if !has {
			return 0, false, false
		}
		v, ok = parseCost(s)
		return v, true, ok
	}
	f, has := e.GetCommonProperties().GetMetadata().GetFilterMetadata()[src.MetadataNamespace].GetFields()[src.MetadataKey]
	if !has {
		return 0, false, false
	}
	switch k := f.GetKind().(type) {
	case *structpb.Value_StringValue:
		v, ok = parseCost(k.StringValue)
		return v, true, ok
	case *structpb.Value_NumberValue:
		x := k.NumberValue
		if x < 0 || x > MaxCost || x != math.Trunc(x) {
			return 0, true, false
		}
		return uint64(x), true, true
	}
	return 0, true, false
}

// lookup finds a header by name: Envoy logs them under the names it was
// told to log, which the configuration holds lower-cased; a name logged in
// another case is found too.
func lookup(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// parseCost reads a whole number of tokens.
func parseCost(s string) (uint64, bool) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || v > MaxCost {
		return 0, false
	}
	return v, true
}
