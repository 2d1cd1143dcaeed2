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
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// configSource is where the live descriptor configuration comes from: the
// watched directory (CONFIG_TYPE=FILE) or an xDS server (GRPC_XDS_SOTW).
type configSource struct {
	current  func() *descriptors.Config
	degraded func() string
	// run is background work, until ctx ends.
	run func(ctx context.Context) error
	// trigger asks for a reload (SIGHUP); a no-op over xDS.
	trigger func()
	// stop ends work started before run (the xDS subscription that the
	// start waited on); it is called once, after run has returned.
	stop func()
	// namespace is the deployment's (NAMESPACE): /rlconfig shows it on the
	// rules of files that name none, unless it is the default, so that a
	// default deployment's /rlconfig reads as envoyproxy/ratelimit's.
	namespace string
}

func (c configSource) dump() string {
	if cfg := c.current(); cfg != nil {
		if c.namespace == dynamo.DefaultNamespace {
			return cfg.Dump()
		}
		return cfg.DumpIn(c.namespace)
	}
	return ""
}

func openConfig(ctx context.Context, s config.Settings, m *metrics.Metrics, log *logrus.Entry) (configSource, error) {
	if s.ConfigType == config.ConfigTypeXDS {
		return openXDS(ctx, s, m, log)
	}
	reloader, err := config.NewReloader(config.ReloaderOptions{
		Dir:        s.ConfigDir(),
		WatchDir:   s.WatchDir(),
		Load:       s.Loader(),
		Logger:     log,
		OnReload:   func(ok bool, _ error, at time.Time) { m.ObserveReload(ok, at) },
		StartEmpty: s.ForceStartWithoutInitialConfig,
	})
	if err != nil {
		return configSource{}, fmt.Errorf("load descriptor config: %w", err)
	}
	return configSource{current: reloader.Current, degraded: reloader.WatchProblem, run: reloader.Run, trigger: reloader.Trigger, stop: func() {}, namespace: s.Namespace}, nil
}

// openXDS subscribes to the configuration over xDS. Unless
// FORCE_START_WITHOUT_INITIAL_CONFIG, it waits for the first configuration
// before returning, as envoyproxy/ratelimit does; forced, it returns at once
// and every request is answered OK (an empty configuration) until the first
// configuration arrives.
func openXDS(ctx context.Context, s config.Settings, m *metrics.Metrics, log *logrus.Entry) (configSource, error) {
	sources := &reloadSources{m: m}
	md, err := s.XDSNodeMetadataMap()
	if err != nil {
		return configSource{}, fmt.Errorf("CONFIG_GRPC_XDS_NODE_METADATA: %w", err)
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
			return configSource{}, err
		}
	}
	if s.ForceStartWithoutInitialConfig {
		if o.Initial, err = descriptors.Parse(nil, s.LoadOptions()); err != nil {
			return configSource{}, err
		}
	}
	client, err := xdsconfig.New(o)
	if err != nil {
		return configSource{}, err
	}
	adjust, err := openAdjustments(s, client, sources, log)
	if err != nil {
		return configSource{}, err
	}
	// The subscription starts now, so the start can wait for it; it lives
	// until stop.
	subCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- client.Run(subCtx)
	}()
	stop := func() { cancel(); wg.Wait() }
	if !s.ForceStartWithoutInitialConfig {
		log.Info("waiting for the first descriptor configuration over xDS")
		select {
		case <-client.Ready():
		case err := <-errc:
			stop()
			return configSource{}, fmt.Errorf("xds: %w", err)
		case <-ctx.Done():
			stop()
			return configSource{}, ctx.Err()
		}
	}
	src := configSource{
		current:  client.Current,
		degraded: func() string { return "" },
		run: func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return nil
			case err := <-errc:
				return err
			}
		},
		trigger: func() {
			log.Info("SIGHUP: the configuration comes over xDS and there is no adjustments directory; nothing to reload")
		},
		stop:      stop,
		namespace: s.Namespace,
	}
	if adjust != nil {
		src.degraded, src.trigger = adjust.WatchProblem, adjust.Trigger
		src.run = func(ctx context.Context) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			watched := make(chan error, 1)
			go func() { watched <- adjust.Run(ctx) }()
			select {
			case <-ctx.Done():
				return <-watched
			case err := <-errc:
				cancel()
				if werr := <-watched; werr != nil && !errors.Is(werr, context.Canceled) {
					return errors.Join(err, werr)
				}
				return err
			case err := <-watched:
				return err
			}
		}
	}
	return src, nil
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
