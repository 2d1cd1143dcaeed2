package main

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/dynalimit/dynalimit/internal/accesslog"
	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/adminpage"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/server"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/tracing"
)

// parts are what the service and its server are built from.
type parts struct {
	settings config.Settings
	backend  backend
	config   configSource
	metrics  *metrics.Metrics
	gatherer prometheus.Gatherer
	compat   *metrics.Compat // nil without USE_STATSD
	// rlqsMetrics records the Rate Limit Quota Service (nil: none).
	rlqsMetrics *metrics.RLQS
	tracing     *tracing.Provider
	adjuster    *adjust.Adjuster
	log         func(component string) *logrus.Entry
}

// newServer is the service over p's backend and configuration, served on
// the listeners p's settings configure, with its access log, the admin API
// when ADMIN_API, and TLS when GRPC_SERVER_USE_TLS, whose certificates
// certs rereads (nil without TLS).
func newServer(p parts) (srv *server.Server, certs *config.CertWatcher, err error) {
	s := p.settings
	svc := newService(p)
	o := serverOptions(p, svc)
	o.Services = append(o.Services,
		accesslog.New(p.adjuster, p.config.Current, p.metrics, p.log("accesslog")).Register,
		newRLQS(p, svc).Register)
	if s.AdminAPI {
		o.Admin = adminHandler(p, admin.NewAPI(s, p.backend.Operator(), p.config.Current, p.log("admin")))
		p.log("admin").WithField("debug_addr", o.DebugAddr).Warn("admin API enabled at /admin/ on the debug listener, without authentication: keep that listener private")
	}
	if s.GRPCServerUseTLS {
		if o.TLS, certs, err = config.ServerTLS(s, p.log("tls")); err != nil {
			return nil, nil, err
		}
	}
	if srv, err = server.New(o); err != nil {
		return nil, nil, err
	}
	return srv, certs, nil
}

// adminHandler serves the admin API and, at adminpage.Prefix, the
// operator's page over it.
func adminHandler(p parts, api *admin.API) http.Handler {
	page := adminpage.New(adminpage.Options{
		API: api, Live: p.config.Current, ConfigDump: configDump(p.config, p.settings.Namespace),
		Gatherer: p.gatherer, Store: p.settings.BackendType,
	})
	mux := http.NewServeMux()
	mux.Handle("/admin/", api)
	mux.Handle(adminpage.Prefix, page)
	mux.Handle(strings.TrimSuffix(adminpage.Prefix, "/"), page)
	return mux
}

// newService is the rate-limit service over p's backend and the live
// configuration of p's source, as p's settings configure it.
func newService(p parts) *service.Service {
	s, b := p.settings, p.backend
	return service.New(tracing.Store(service.Instrument(b.Store(), p.metrics), p.tracing), p.config.Current,
		service.WithMetrics(p.metrics),
		service.WithLogger(p.log("service")),
		service.WithShadowMode(s.ShadowMode),
		service.WithNearLimitRatio(s.NearLimitRatio),
		service.WithResponseHeaders(s.LimitResponseHeadersEnabled, s.LimitLimitHeader, s.LimitRemainingHeader, s.LimitResetHeader),
		service.WithDynamicMetadata(s.ResponseDynamicMetadata),
		service.WithExtendedMetadata(s.ResponseMetadataFormat == config.MetadataExtended),
		service.WithDescriptorHitsCharge(s.DescriptorHitsAddend == config.HitsAddendCharge),
		// Under local the DynamoDB store decides what it cannot on the
		// replica's share: what still fails is refused. The embedded store
		// does not fail, and keeps allow.
		service.WithOnUnavailable(s.OnUnavailable == config.OnUnavailableBlock ||
			(s.OnUnavailable == config.OnUnavailableLocal && s.BackendType == config.BackendDynamoDB)),
		service.WithHierarchy(b.Hierarchy()),
		service.WithNamespaceGate(b.Gate()),
		service.WithAdjuster(p.adjuster),
		service.WithRequestLimits(service.RequestLimits{
			Descriptors: s.RequestMaxDescriptors,
			Entries:     s.RequestMaxEntries,
			EntryBytes:  s.RequestMaxEntryBytes,
		}),
	)
}

// serverOptions are the listeners and servers of svc as p's settings
// configure them, without TLS; health awaits the backend's warm-up when it
// has one.
func serverOptions(p parts, svc *service.Service) server.Options {
	s := p.settings
	var await []string
	if w, ok := p.backend.(warmer); ok {
		await = append(await, w.warmupCondition())
	}
	return server.Options{
		GRPCAddr:          hostPort(s.GRPCHost, s.GRPCPort),
		HTTPAddr:          hostPort(s.Host, s.Port),
		DebugAddr:         hostPort(s.DebugHost, s.DebugPort),
		Pprof:             s.DebugPprof,
		RateLimit:         svc,
		JSON:              svcJSON{svc},
		ConfigDump:        configDump(p.config, s.Namespace),
		Degraded:          p.config.WatchProblem,
		Gatherer:          p.gatherer,
		GRPCUDS:           s.GRPCUDS,
		PrometheusAddr:    prometheusAddr(s),
		PrometheusPath:    s.PrometheusPath,
		WaitReady:         s.HealthyWithAtLeastOneConfigLoaded,
		Await:             await,
		UnaryInterceptors: append(interceptors(p.tracing), compatInterceptors(p.compat)...),
		Keepalive: keepalive.ServerParameters{
			MaxConnectionIdle:     s.GRPCMaxConnectionIdle,
			MaxConnectionAge:      s.GRPCMaxConnectionAge,
			MaxConnectionAgeGrace: s.GRPCMaxConnectionAgeGrace,
			Time:                  s.GRPCKeepaliveTime,
			Timeout:               s.GRPCKeepaliveTimeout,
		},
		KeepalivePolicy: keepalive.EnforcementPolicy{
			MinTime:             s.GRPCKeepaliveMinTime,
			PermitWithoutStream: s.GRPCKeepalivePermitWithoutStream,
		},
		MaxConcurrentStreams: uint32(s.GRPCMaxConcurrentStreams),
		Transport:            s.GRPCTransport,
		UnaryMetadata:        p.tracing != nil, // the trace context
		// The embedded store never waits: its calls are answered where
		// they are read.
		InlineCalls:       s.BackendType == config.BackendMemory,
		ReadHeaderTimeout: s.HTTPReadHeaderTimeout,
		ReadTimeout:       s.HTTPReadTimeout,
		IdleTimeout:       s.HTTPIdleTimeout,
		MaxConnections:    s.HTTPMaxConnections,
		Drain:             s.ShutdownDrain,
		Timeout:           s.ShutdownTimeout,
		Logger:            p.log("server"),
	}
}

// svcJSON adapts the service's JSON endpoint to an http.Handler.
type svcJSON struct{ s *service.Service }

func (h svcJSON) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.ServeJSON(w, r) }

// interceptors returns the gRPC interceptors tracing asks for.
func interceptors(tp *tracing.Provider) []grpc.UnaryServerInterceptor {
	if tp == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{tp.UnaryServerInterceptor()}
}

func hostPort(host string, port int) string {
	return host + ":" + strconv.Itoa(port)
}
