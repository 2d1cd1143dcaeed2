package main

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// configSource is where the live descriptor configuration comes from: the
// watched directory (fileSource, CONFIG_TYPE=FILE) or an xDS server
// (xdsSource, GRPC_XDS_SOTW).
type configSource interface {
	// Current is the live configuration.
	Current() *descriptors.Config
	// WatchProblem says why changes may be missed (a watch lost); "" when
	// nothing is wrong.
	WatchProblem() string
	// Trigger asks for a reload (SIGHUP).
	Trigger()
	// Run follows the source until ctx ends. Every goroutine it starts
	// has returned when it returns.
	Run(ctx context.Context) error
	// Ready returns once the source has the configuration to start with,
	// or fails when it cannot have it; Run must have been started. It
	// returns ctx's error when ctx ends first.
	Ready(ctx context.Context) error
}

// openConfig opens the source CONFIG_TYPE names. Nothing runs until Run.
func openConfig(s config.Settings, m *metrics.Metrics, log *logrus.Entry) (configSource, error) {
	if s.ConfigType == config.ConfigTypeXDS {
		return openXDS(s, m, log)
	}
	return openFiles(s, m, log)
}

// configDump is /rlconfig: the live configuration of src. The rules of
// files that name no namespace show namespace (NAMESPACE), unless it is the
// default, so that a default deployment's /rlconfig reads as
// envoyproxy/ratelimit's.
func configDump(src configSource, namespace string) func() string {
	return func() string {
		cfg := src.Current()
		switch {
		case cfg == nil:
			return ""
		case namespace == dynamo.DefaultNamespace:
			return cfg.Dump()
		}
		return cfg.DumpIn(namespace)
	}
}
