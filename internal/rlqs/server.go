package rlqs

import (
	"context"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// Defaults of Options.
const (
	// DefaultTTL is an assignment's time to live: three of Envoy 1.40's
	// 5 s report intervals, so that one lost report or a stream moving to
	// another replica does not expire it.
	DefaultTTL = 15 * time.Second
	// DefaultAbandonAfter is how long a bucket may report no demand before
	// it is abandoned.
	DefaultAbandonAfter = time.Minute
	// DefaultMaxBuckets is the most buckets one stream watches.
	DefaultMaxBuckets = 1000
	// DefaultMaxStreamBytes bounds the bytes of the bucket ids one stream
	// watches (keys and values).
	DefaultMaxStreamBytes = 1 << 20
)

// Charger charges a quota report to the store: *service.Service.
type Charger interface {
	ChargeQuota(ctx context.Context, domain string, entries []descriptors.Entry, c service.QuotaCharge) (service.Quota, error)
}

// Observer records what the server does; metrics.RLQS implements it. Its
// methods must be safe for concurrent use and cheap.
type Observer interface {
	// Streams moves the count of open streams by delta.
	Streams(delta int)
	// Buckets moves the count of watched buckets by delta.
	Buckets(delta int)
	// Pushed counts one bucket action sent: token_bucket, allow_all,
	// deny_all or abandon.
	Pushed(kind string)
	// Share observes a stream's fraction of a bucket's limits.
	Share(fraction float64)
	// OverAdmitted adds requests a report said Envoy admitted past what
	// the limit held (the charge went into debt).
	OverAdmitted(requests float64)
	// StreamError counts a stream ended for a malformed report, by reason.
	StreamError(reason string)
	// ChargeFailed counts a store call for a bucket that failed.
	ChargeFailed()
}

// Options configure a Server. Zero durations and sizes take their
// defaults.
type Options struct {
	// Config returns the live descriptor configuration (nil: none yet).
	Config func() *descriptors.Config
	// Charger charges reports: the rate-limit service over the store.
	Charger Charger
	// TTL is each assignment's time to live (RLQS_ASSIGNMENT_TTL).
	TTL time.Duration
	// AbandonAfter is how long a bucket reports no demand before it is
	// abandoned (RLQS_ABANDON_AFTER).
	AbandonAfter time.Duration
	// MaxBuckets is the most buckets one stream watches
	// (RLQS_MAX_BUCKETS_PER_STREAM); MaxStreamBytes the most bytes of
	// their ids (RLQS_MAX_STREAM_BYTES); MaxKeys the most keys of one
	// bucket id (REQUEST_MAX_ENTRIES).
	MaxBuckets, MaxStreamBytes, MaxKeys int
	// Observer records metrics; nil records none.
	Observer Observer
	// Logger logs stream errors; the server adds component=rlqs.
	Logger *logrus.Entry
}

// Server is envoy.service.rate_limit_quota.v3.RateLimitQuotaService. Build
// it with New; it is safe for concurrent use.
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	o    Options
	now  func() time.Time
	pool *pool
}

// New returns a Server with o's settings.
func New(o Options) *Server {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.AbandonAfter <= 0 {
		o.AbandonAfter = DefaultAbandonAfter
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.MaxStreamBytes <= 0 {
		o.MaxStreamBytes = DefaultMaxStreamBytes
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = service.DefaultMaxEntries
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Logger == nil {
		o.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	o.Logger = o.Logger.WithField("component", "rlqs")
	s := &Server{o: o, now: time.Now}
	s.pool = newPool(s)
	return s
}

// Register registers s on gs (either gRPC transport).
func (s *Server) Register(gs grpc.ServiceRegistrar) {
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, s)
}

type nopObserver struct{}

func (nopObserver) Streams(int)          {}
func (nopObserver) Buckets(int)          {}
func (nopObserver) Pushed(string)        {}
func (nopObserver) Share(float64)        {}
func (nopObserver) OverAdmitted(float64) {}
func (nopObserver) StreamError(string)   {}
func (nopObserver) ChargeFailed()        {}
