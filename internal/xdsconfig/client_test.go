package xdsconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/credentials"

	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/internal/xdsconfig"
	"github.com/dynalimit/dynalimit/internal/xdstest"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/envoyproxy/go-control-plane/pkg/cache/v3.(*snapshotCache).respondDeltaWatches"))
}

const nodeID = "envoy-ratelimit"

// push sets the whole configuration the node sees.
func push(t *testing.T, c cache.SnapshotCache, version string, confs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	xdstest.Push(t, c, nodeID, version, confs...)
}

func conf(domain string, unit rlsconf.RateLimitUnit, rpu uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key:       "user",
		RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu},
	}}}
}

func parse(files []descriptors.File) (*descriptors.Config, error) {
	return descriptors.Parse(files, descriptors.Options{})
}

// start runs a client until the test ends.
func start(t *testing.T, o xdsconfig.Options) *xdsconfig.Client {
	t.Helper()
	o.NodeID = nodeID
	o.Parse = parse
	if o.Backoff.Initial == 0 {
		o.Backoff = xdsconfig.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	o.ConnectRetryInterval = 50 * time.Millisecond
	c, err := xdsconfig.New(o)
	if err != nil {
		t.Fatalf("xdsconfig.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	return c
}

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func limitOf(c *xdsconfig.Client, domain string) uint64 {
	cfg := c.Current()
	if cfg == nil {
		return 0
	}
	m, ok := cfg.Match(domain, []descriptors.Entry{{Key: "user", Value: "u"}})
	if !ok || m.Rule == nil || len(m.Rule.Limits) == 0 {
		return 0
	}
	return m.Rule.Limits[0].RequestsPerUnit
}

func TestPushChangeAndBadPush(t *testing.T) {
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	m := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	addr := m.Addr()
	defer m.Stop()
	c := start(t, xdsconfig.Options{ServerURL: addr, Headers: map[string]string{"x-tenant": "gw"}})
	if c.Current() != nil {
		t.Fatalf("Current() before a push = non-nil, want nil (not forced to start)")
	}

	push(t, snap, "1", conf("api", rlsconf.RateLimitUnit_MINUTE, 10))
	eventually(t, "the first config", func() bool { return limitOf(c, "api") == 10 })
	push(t, snap, "2", conf("api", rlsconf.RateLimitUnit_MINUTE, 20), conf("chat", rlsconf.RateLimitUnit_HOUR, 5))
	eventually(t, "the changed config", func() bool { return limitOf(c, "api") == 20 && limitOf(c, "chat") == 5 })

	// A unit the schema does not know: rejected as a file would be.
	push(t, snap, "3", conf("api", rlsconf.RateLimitUnit_UNKNOWN, 30))
	eventually(t, "the NACK", func() bool { return len(m.NACKs()) >= 1 })
	if got := m.NACKs()[0]; !strings.Contains(got, "xds:api") || !strings.Contains(got, "unit") {
		t.Errorf("NACK message = %q, want the resource and the problem named", got)
	}
	if limitOf(c, "api") != 20 || limitOf(c, "chat") != 5 {
		t.Errorf("after a bad push: limits api %d chat %d, want the second config (20, 5) still serving", limitOf(c, "api"), limitOf(c, "chat"))
	}
	// The same domain twice in one snapshot is a bad push too.
	push(t, snap, "4", conf("api", rlsconf.RateLimitUnit_MINUTE, 40), &rlsconf.RateLimitConfig{Name: "api-2", Domain: "api"})
	eventually(t, "the second NACK", func() bool {
		n := m.NACKs()
		return strings.Contains(n[len(n)-1], "api") && strings.Contains(n[len(n)-1], "xds:api-2")
	})
	if limitOf(c, "api") != 20 {
		t.Errorf("after a duplicate domain: limit %d, want 20", limitOf(c, "api"))
	}
	if h := m.Header("x-tenant"); len(h) == 0 || h[0] != "gw" {
		t.Errorf("stream metadata x-tenant = %v, want [gw]", h)
	}
}

func TestReconnectAfterRestart(t *testing.T) {
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	m := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	addr := m.Addr()
	c := start(t, xdsconfig.Options{ServerURL: addr})
	push(t, snap, "1", conf("api", rlsconf.RateLimitUnit_MINUTE, 10))
	eventually(t, "the first config", func() bool { return limitOf(c, "api") == 10 })
	m.Stop()

	// A new server, new state, same address: the client reconnects and
	// gets the whole state again.
	snap2 := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	push(t, snap2, "1", conf("api", rlsconf.RateLimitUnit_MINUTE, 15))
	m2 := xdstest.Start(t, snap2, addr, nil)
	defer m2.Stop()
	eventually(t, "the resync after the restart", func() bool { return limitOf(c, "api") == 15 })
}

func TestMTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	serverTLS := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	m := xdstest.Start(t, snap, "127.0.0.1:0", serverTLS)
	addr := m.Addr()
	defer m.Stop()
	push(t, snap, "1", conf("api", rlsconf.RateLimitUnit_MINUTE, 10))

	// As Envoy Gateway mounts them: client cert and key, the CA, and the
	// server's name (the URL's host is an IP here).
	clientTLS, err := xdsconfig.ClientTLS(pki.ClientCert, pki.ClientKey, pki.CAFile, "ratelimit")
	if err != nil {
		t.Fatalf("ClientTLS() = %v", err)
	}
	c := start(t, xdsconfig.Options{ServerURL: addr, TLS: clientTLS})
	eventually(t, "the config over mTLS", func() bool { return limitOf(c, "api") == 10 })

	// Without a client certificate the server refuses: nothing arrives.
	noCert, err := xdsconfig.ClientTLS("", "", pki.CAFile, "ratelimit")
	if err != nil {
		t.Fatalf("ClientTLS() = %v", err)
	}
	c2 := start(t, xdsconfig.Options{ServerURL: addr, TLS: noCert})
	time.Sleep(300 * time.Millisecond)
	if c2.Current() != nil {
		t.Errorf("without a client certificate: Current() = non-nil, want no config")
	}
}

// TestForceStart: with an empty initial configuration every answer is OK
// until the first push, and the pushed limits apply after it.
func TestForceStart(t *testing.T) {
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	m := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	addr := m.Addr()
	defer m.Stop()
	empty, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, xdsconfig.Options{ServerURL: addr, Initial: empty})
	svc := service.New(memstore.New(), c.Current)
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{{
		Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
	}}}
	for i := range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
			t.Fatalf("call %d before the first push = %v, %v, want OK", i, resp.GetOverallCode(), err)
		}
	}
	if c.Loaded() {
		t.Fatalf("Loaded() before the first push = true")
	}
	push(t, snap, "1", conf("api", rlsconf.RateLimitUnit_HOUR, 1))
	<-c.Ready()
	codes := []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}
	for i, want := range codes {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil || resp.GetOverallCode() != want {
			t.Errorf("call %d after the push = %v, %v, want %v", i, resp.GetOverallCode(), err, want)
		}
	}
}

// TestReadyAfterReport: the first configuration is reported to OnUpdate
// before Ready closes, so a reload started by whoever waited for Ready is
// counted after it (its report is not overwritten by the first push's).
func TestReadyAfterReport(t *testing.T) {
	snap := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	m := xdstest.Start(t, snap, "127.0.0.1:0", nil)
	defer m.Stop()
	var c *xdsconfig.Client
	loadedAtReport := make(chan bool, 1) // Loaded() while the first push is reported
	c = start(t, xdsconfig.Options{ServerURL: m.Addr(), OnUpdate: func(ok bool, _ error, _ time.Time) {
		if ok {
			select {
			case loadedAtReport <- c.Loaded():
			default:
			}
		}
	}})
	push(t, snap, "1", conf("api", rlsconf.RateLimitUnit_MINUTE, 10))
	<-c.Ready()
	select {
	case loaded := <-loadedAtReport:
		if loaded {
			t.Errorf("Loaded() = true while the first configuration was being reported, want false until OnUpdate returns")
		}
	default:
		t.Fatalf("Ready closed before the first configuration was reported to OnUpdate")
	}
}

func TestToFile(t *testing.T) {
	c := &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "k", Value: "v", ShadowMode: true, QuotaMode: true, DetailedMetric: true,
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 3, Name: "n",
			Replaces: []*rlsconf.RateLimitReplace{{Name: "other"}}},
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "inner", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}},
	}}}
	f, err := xdsconfig.ToFile(c)
	if err != nil {
		t.Fatalf("ToFile() = %v", err)
	}
	if f.Name != "xds:r" {
		t.Errorf("ToFile().Name = %q, want xds:r", f.Name)
	}
	cfg, err := parse([]descriptors.File{f})
	if err != nil {
		t.Fatalf("Parse(ToFile()) = %v\n%s", err, f.Data)
	}
	m, ok := cfg.Match("d", []descriptors.Entry{{Key: "k", Value: "v"}})
	if !ok || m.Rule == nil || !m.Rule.ShadowMode || !m.Rule.QuotaMode || !m.Rule.DetailedMetric {
		t.Fatalf("Match() = %+v, %v, want the rule with shadow, quota and detailed metric", m.Rule, ok)
	}
	if len(cfg.Warnings()) != 0 {
		t.Errorf("Warnings() = %v, want none", cfg.Warnings())
	}
}
