package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/xdsconfig"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// xdsSource is the configuration pushed by an xDS server (GRPC_XDS_SOTW),
// merged with the adjustments of the descriptor directory when there is
// one. Run subscribes, and watches the adjustments; unless
// FORCE_START_WITHOUT_INITIAL_CONFIG, Ready waits for the first push, as
// envoyproxy/ratelimit does; forced, every request is answered OK (an
// empty configuration) until the first push arrives.
type xdsSource struct {
	client *xdsconfig.Client
	// adjust reloads the adjustments directory; nil when there is none.
	adjust *config.Reloader
	// awaitFirst: Ready waits for the first push.
	awaitFirst bool
	log        *logrus.Entry

	// ended is closed when the subscription has ended, with its error in
	// err.
	ended chan struct{}
	err   error
}

var _ configSource = (*xdsSource)(nil)

// openXDS makes the xDS client and loads the adjustments; nothing is
// dialled until Run.
func openXDS(s config.Settings, m *metrics.Metrics, log *logrus.Entry) (*xdsSource, error) {
	sources := &reloadSources{m: m}
	o, err := xdsOptions(s, sources, log)
	if err != nil {
		return nil, err
	}
	client, err := xdsconfig.New(o)
	if err != nil {
		return nil, err
	}
	adjust, err := openAdjustments(s, client, sources, log)
	if err != nil {
		return nil, err
	}
	return &xdsSource{client: client, adjust: adjust, awaitFirst: !s.ForceStartWithoutInitialConfig, log: log, ended: make(chan struct{})}, nil
}

// xdsOptions are the xDS client's options as s configures them; its
// updates are reported to sources.
func xdsOptions(s config.Settings, sources *reloadSources, log *logrus.Entry) (xdsconfig.Options, error) {
	md, err := s.XDSNodeMetadataMap()
	if err != nil {
		return xdsconfig.Options{}, fmt.Errorf("CONFIG_GRPC_XDS_NODE_METADATA: %w", err)
	}
	o := xdsconfig.Options{
		ServerURL:            s.XDSServerURL,
		NodeID:               s.XDSNodeID,
		NodeMetadata:         md,
		Headers:              s.XDSHeaderMap(),
		ConnectRetryInterval: s.XDSConnectRetryInterval,
		Backoff: xdsconfig.Backoff{
			Initial: s.XDSBackoffInitial, Max: s.XDSBackoffMax,
			RandomFactor: s.XDSBackoffRandomFactor, Jitter: s.XDSBackoffJitter,
		},
		MaxRecvMsgSize: s.XDSMaxMsgSize,
		Parse: func(files []descriptors.File) (*descriptors.Config, error) {
			return descriptors.Parse(files, s.LoadOptions())
		},
		OnUpdate: func(ok bool, _ error, at time.Time) { sources.observe(sourceXDS, ok, at) },
		Logger:   log,
	}
	if s.XDSServerUseTLS {
		if o.TLS, err = xdsconfig.ClientTLS(s.XDSClientTLSCert, s.XDSClientTLSKey, s.XDSServerTLSCACert, s.XDSServerTLSSAN); err != nil {
			return xdsconfig.Options{}, err
		}
	}
	if s.ForceStartWithoutInitialConfig {
		if o.Initial, err = descriptors.Parse(nil, s.LoadOptions()); err != nil {
			return xdsconfig.Options{}, err
		}
	}
	return o, nil
}

// Current is the last configuration pushed, merged with the adjustments.
func (x *xdsSource) Current() *descriptors.Config { return x.client.Current() }

// WatchProblem is the adjustments directory's; "" without one.
func (x *xdsSource) WatchProblem() string {
	if x.adjust == nil {
		return ""
	}
	return x.adjust.WatchProblem()
}

// Trigger reloads the adjustments directory; the pushed rules come when the
// server pushes them.
func (x *xdsSource) Trigger() {
	if x.adjust == nil {
		x.log.Info("SIGHUP: the configuration comes over xDS and there is no adjustments directory; nothing to reload")
		return
	}
	x.adjust.Trigger()
}

// Run subscribes, and watches the adjustments directory, until ctx ends. It
// is called once.
func (x *xdsSource) Run(ctx context.Context) error {
	named := map[string]func(context.Context) error{"xds": x.subscribe}
	if x.adjust != nil {
		named["adjustments"] = x.adjust.Run
	}
	return runTasks(ctx, func(name string) *logrus.Entry { return x.log.WithField("task", name) }, named)
}

// subscribe runs the subscription until ctx ends, or it fails for good
// (xdsconfig.Client.Run); then it closes ended.
func (x *xdsSource) subscribe(ctx context.Context) error {
	defer close(x.ended)
	x.err = x.client.Run(ctx)
	return x.err
}

// Ready waits for the first push, unless FORCE_START_WITHOUT_INITIAL_CONFIG.
func (x *xdsSource) Ready(ctx context.Context) error {
	if !x.awaitFirst {
		return nil
	}
	x.log.Info("waiting for the first descriptor configuration over xDS")
	select {
	case <-x.client.Ready():
		return nil
	case <-x.ended:
		if x.err == nil {
			return errors.New("xds: the subscription ended before the first configuration")
		}
		return fmt.Errorf("xds: %w", x.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openAdjustments loads, over xDS, the adjustments for the pushed rules
// from the descriptor directory, when there is one: files with domain: and
// adjustments: only, merged by domain with every push (the xDS resource has
// no field for them), and watched and reloaded as descriptor files are. A
// directory that does not exist means no adjustments (nil), unless
// CONFIG_DIR names it. A bad file stops the start, and on a reload keeps the
// adjustments that serve.
func openAdjustments(s config.Settings, client *xdsconfig.Client, sources *reloadSources, log *logrus.Entry) (*config.Reloader, error) {
	dir := s.ConfigDir()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && s.ConfigDirOverride == "" {
		log.WithField("dir", dir).Info("no adjustments directory: the rules pushed over xDS are not settled after the response")
		return nil, nil
	}
	// OnReload calls are one at a time, the first (at the start) before
	// NewReloader returns; the later ones come from Run.
	var reloader *config.Reloader
	var last *descriptors.Config
	update := func() {
		if cur := reloader.Current(); cur != last {
			last = cur
			client.SetAdjustments(cur)
		}
	}
	reloader, err := config.NewReloader(config.ReloaderOptions{
		Dir:      dir,
		WatchDir: s.WatchDir(),
		Load:     adjustmentsLoader(s),
		Logger:   log,
		OnReload: func(ok bool, _ error, at time.Time) {
			if reloader != nil {
				update()
			}
			sources.observe(sourceAdjustments, ok, at)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load adjustments for the rules pushed over xDS: %w", err)
	}
	update()
	return reloader, nil
}

// adjustmentsLoader loads a directory of adjustments for rules that arrive
// over xDS.
func adjustmentsLoader(s config.Settings) func(dir string) (*descriptors.Config, error) {
	opts := s.LoadOptions()
	opts.AdjustmentsOnly = true
	return func(dir string) (*descriptors.Config, error) { return descriptors.LoadDir(dir, opts) }
}

// The sources of a configuration over xDS: the pushed rules and the
// adjustments directory.
const (
	sourceXDS = iota
	sourceAdjustments
)

// reloadSources reports the reloads of the two sources of a configuration
// over xDS: each attempt is counted, and the last-reload gauge is 1 only
// while the last attempt of both succeeded (a push that lands after a bad
// adjustments file does not clear the failure).
type reloadSources struct {
	m      *metrics.Metrics
	mu     sync.Mutex
	failed [2]bool
}

// observe records an attempt of source (sourceXDS or sourceAdjustments).
func (r *reloadSources) observe(source int, ok bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[source] = !ok
	r.m.ObserveSourceReload(ok, !r.failed[sourceXDS] && !r.failed[sourceAdjustments], at)
}
