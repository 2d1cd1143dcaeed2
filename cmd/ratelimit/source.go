package main

import (
	"context"
	"fmt"
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
		OnUpdate: func(ok bool, _ error, at time.Time) { m.ObserveReload(ok, at) },
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
	return configSource{
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
		trigger:   func() { log.Info("SIGHUP: the configuration comes over xDS; nothing to reload") },
		stop:      stop,
		namespace: s.Namespace,
	}, nil
}
