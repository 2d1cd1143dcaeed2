package xdsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/sirupsen/logrus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// TypeURL is the resource type the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Backoff is the exponential backoff between streams: Initial, doubled
// after each stream that broke without delivering a response, up to Max.
// With Jitter, each wait is drawn uniformly within ±RandomFactor of it.
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	Jitter       bool
}

// Options configure a Client. ServerURL is required.
type Options struct {
	// ServerURL is the management server's address, host:port (a gRPC
	// target).
	ServerURL string
	// NodeID and NodeMetadata identify this client to the server, which
	// keys its snapshots by node id.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on every stream.
	Headers map[string]string
	// TLS, when set, connects over TLS (with a client certificate for
	// mTLS); nil connects in plaintext.
	TLS *tls.Config
	// ConnectRetryInterval is how often the channel tries to reach a
	// server it cannot reach; zero means 3s.
	ConnectRetryInterval time.Duration
	// Backoff paces new streams after one broke; zero fields mean 10s,
	// 60s, 0.5.
	Backoff Backoff
	// MaxRecvMsgSize bounds a response's size in bytes; zero means gRPC's
	// default (4 MiB).
	MaxRecvMsgSize int
	// Parse compiles a response's resources, rendered by ToFile
	// (descriptors.Parse with the service's options).
	Parse func(files []descriptors.File) (*descriptors.Config, error)
	// Initial, when set, is served by Current until the first
	// configuration arrives (FORCE_START_WITHOUT_INITIAL_CONFIG: an empty
	// configuration, which answers OK to everything). Without it Current
	// returns nil until then.
	Initial *descriptors.Config
	// OnUpdate, when set, is called after every response with whether its
	// configuration was applied and when; for the first applied, before
	// Ready is closed.
	OnUpdate func(ok bool, err error, at time.Time)
	// Logger receives one entry per response and per broken stream; nil
	// means the standard logger.
	Logger *logrus.Entry
}

// Client subscribes to the descriptor configuration and holds the live one:
// the last pushed rules merged with the adjustments of SetAdjustments.
type Client struct {
	o       Options
	node    *corev3.Node
	current atomic.Pointer[descriptors.Config]
	ready   chan struct{}
	once    sync.Once
	log     *logrus.Entry

	// mu guards rules and adjust, and orders the stores to current.
	mu     sync.Mutex
	rules  *descriptors.Config // the last pushed configuration, nil before one
	adjust *descriptors.Config // adjustments for the pushed rules (AdjustmentsOnly); may be nil
}

// New checks o and returns a Client; nothing is dialled until Run.
func New(o Options) (*Client, error) {
	if o.ServerURL == "" {
		return nil, errors.New("xdsconfig: ServerURL is empty")
	}
	if o.Parse == nil {
		return nil, errors.New("xdsconfig: Parse is nil")
	}
	if o.ConnectRetryInterval <= 0 {
		o.ConnectRetryInterval = 3 * time.Second
	}
	if o.Backoff.Initial <= 0 {
		o.Backoff.Initial = 10 * time.Second
	}
	if o.Backoff.Max < o.Backoff.Initial {
		o.Backoff.Max = max(60*time.Second, o.Backoff.Initial)
	}
	if o.Backoff.RandomFactor <= 0 || o.Backoff.RandomFactor > 1 {
		o.Backoff.RandomFactor = 0.5
	}
	if o.Logger == nil {
		o.Logger = logrus.NewEntry(logrus.StandardLogger()).WithField("component", "xds")
	}
	md := make(map[string]*structpb.Value, len(o.NodeMetadata))
	for k, v := range o.NodeMetadata {
		md[k] = structpb.NewStringValue(v)
	}
	c := &Client{
		o:     o,
		node:  &corev3.Node{Id: o.NodeID, Metadata: &structpb.Struct{Fields: md}},
		ready: make(chan struct{}),
		log:   o.Logger,
	}
	if o.Initial != nil {
		c.current.Store(o.Initial)
	}
	return c, nil
}

// Current returns the live configuration: the last one pushed (with the
// adjustments merged in), Initial before any was, or nil before any was
// without Initial.
func (c *Client) Current() *descriptors.Config { return c.current.Load() }

// SetAdjustments sets the adjustments merged by domain with every pushed
// configuration (descriptors.Config.WithAdjustments): a configuration
// parsed with descriptors.Options.AdjustmentsOnly, from files, since the
// xDS resource has no field for them; nil removes them. When a
// configuration has been pushed, the merge is live on return. An
// adjustment that selects no limit of the pushed rules is logged as an
// error and left out; the rules serve as pushed.
func (c *Client) SetAdjustments(a *descriptors.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.adjust = a
	if c.rules != nil {
		c.publish(logrus.Fields{"cause": "adjustments"})
	}
}

// publish makes the pushed rules merged with the adjustments live, logging
// the adjustments left out. c.mu is held.
func (c *Client) publish(fields logrus.Fields) {
	cfg, problems := c.rules.WithAdjustments(c.adjust)
	c.current.Store(cfg)
	if len(problems) > 0 {
		ps := make([]string, len(problems))
		for i, p := range problems {
			ps[i] = p.Error()
		}
		c.log.WithFields(fields).WithField("problems", ps).Error("adjustments left out: they select no limit of the rules pushed over xDS; those limits are not settled after the response")
	}
}

// Ready is closed when the first pushed configuration has been applied
// and reported to OnUpdate.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Loaded reports whether a pushed configuration has been applied.
func (c *Client) Loaded() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// Run subscribes until ctx ends, then returns nil; it returns an error only
// when the channel cannot be built (a malformed ServerURL).
func (c *Client) Run(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if c.o.TLS != nil {
		creds = credentials.NewTLS(c.o.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  c.o.ConnectRetryInterval,
				Multiplier: 1,
				Jitter:     0.5,
				MaxDelay:   c.o.ConnectRetryInterval,
			},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if c.o.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.o.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(c.o.ServerURL, opts...)
	if err != nil {
		return fmt.Errorf("xdsconfig: server %s: %w", c.o.ServerURL, err)
	}
	defer conn.Close()
	c.log.WithFields(logrus.Fields{"server": c.o.ServerURL, "node_id": c.o.NodeID, "tls": c.o.TLS != nil}).Info("subscribing to rate-limit configuration over xDS")

	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	wait := c.o.Backoff.Initial
	for {
		delivered, err := c.stream(ctx, ads)
		if ctx.Err() != nil {
			return nil
		}
		if delivered {
			wait = c.o.Backoff.Initial
		}
		d := c.jitter(wait)
		c.log.WithError(err).WithField("retry_in_ms", d.Milliseconds()).Warn("xDS stream ended; opening a new one")
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, c.o.Backoff.Max)
	}
}

func (c *Client) jitter(d time.Duration) time.Duration {
	if !c.o.Backoff.Jitter {
		return d
	}
	f := 1 + c.o.Backoff.RandomFactor*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

// stream runs one ADS stream until it breaks or ctx ends, and reports
// whether it delivered a response.
func (c *Client) stream(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.o.Headers))
	}
	// WaitForReady: while the server cannot be reached the stream waits
	// for the channel, which retries every ConnectRetryInterval.
	st, err := ads.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	// A new stream asks afresh (no version), so the server sends the full
	// state even when it has not changed.
	if err := st.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL}); err != nil {
		return false, err
	}
	acked, delivered := "", false
	rejected, rejectWait := "", c.o.Backoff.Initial
	for {
		resp, err := st.Recv()
		if err != nil {
			return delivered, err
		}
		delivered = true
		req := &discovery.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		if resp.GetTypeUrl() != TypeURL {
			req.TypeUrl = resp.GetTypeUrl()
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "xdsconfig: not subscribed to " + resp.GetTypeUrl()}
		} else if err := c.apply(resp); err != nil {
			req.VersionInfo = acked
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			// A server answers a NACK by sending the state again until
			// it changes (go-control-plane's cache does): NACK a version
			// already NACKed only after a backoff, not in a hot loop.
			if resp.GetVersionInfo() == rejected {
				t := time.NewTimer(c.jitter(rejectWait))
				select {
				case <-ctx.Done():
					t.Stop()
					return delivered, ctx.Err()
				case <-t.C:
				}
				rejectWait = min(2*rejectWait, c.o.Backoff.Max)
			} else {
				rejected, rejectWait = resp.GetVersionInfo(), c.o.Backoff.Initial
			}
		} else {
			rejected = ""
			acked = resp.GetVersionInfo()
			req.VersionInfo = acked
		}
		if err := st.Send(req); err != nil {
			return delivered, err
		}
	}
}

// apply compiles a response's resources and, if they compile, makes them
// the live configuration.
func (c *Client) apply(resp *discovery.DiscoveryResponse) error {
	start := time.Now()
	files := make([]descriptors.File, 0, len(resp.GetResources()))
	var err error
	for _, r := range resp.GetResources() {
		conf := &rlsconf.RateLimitConfig{}
		if e := r.UnmarshalTo(conf); e != nil {
			err = fmt.Errorf("xdsconfig: resource of type %s: %w", r.GetTypeUrl(), e)
			break
		}
		f, e := ToFile(conf)
		if e != nil {
			err = e
			break
		}
		files = append(files, f)
	}
	var cfg *descriptors.Config
	if err == nil {
		cfg, err = c.o.Parse(files)
		if err == nil && cfg == nil {
			err = errors.New("xdsconfig: Parse returned no configuration")
		}
	}
	at := time.Now()
	fields := logrus.Fields{"version": resp.GetVersionInfo(), "resources": len(files), "duration_ms": at.Sub(start).Milliseconds()}
	if err != nil {
		c.log.WithFields(fields).WithError(err).Error("xDS configuration rejected (NACK); the live configuration keeps serving")
		if c.o.OnUpdate != nil {
			c.o.OnUpdate(false, err, at)
		}
		return err
	}
	c.mu.Lock()
	c.rules = cfg
	c.publish(logrus.Fields{"version": resp.GetVersionInfo()})
	c.mu.Unlock()
	if warnings := cfg.Warnings(); len(warnings) > 0 {
		ws := make([]string, len(warnings))
		for i, w := range warnings {
			ws[i] = w.Error()
		}
		fields["warnings"] = ws
	}
	c.log.WithFields(fields).WithField("domains", cfg.Domains()).Info("xDS configuration applied (ACK)")
	if c.o.OnUpdate != nil {
		c.o.OnUpdate(true, nil, at)
	}
	// Ready after the report: whoever waits for the first configuration
	// sees its outcome already counted, and a reload it starts is counted
	// after it.
	c.once.Do(func() { close(c.ready) })
	return nil
}

// ClientTLS builds the TLS configuration of the connection to the
// management server from PEM files: the server is verified against caFile
// (the system roots when empty) and, when serverName is set, must carry
// that name rather than the ServerURL's host; certFile and keyFile, when
// set, are the client certificate presented for mTLS.
func ClientTLS(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("xdsconfig: client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("xdsconfig: server CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xdsconfig: server CA %s: no PEM certificate", caFile)
		}
		c.RootCAs = pool
	}
	return c, nil
}
