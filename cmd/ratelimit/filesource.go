package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/metrics"
)

// fileSource is the descriptor directory (CONFIG_TYPE=FILE), loaded when
// it opens, then watched and reloaded by Run, and on Trigger (SIGHUP).
type fileSource struct {
	*config.Reloader
}

var _ configSource = fileSource{}

// openFiles loads the descriptor directory; a directory that does not load
// fails the start, unless FORCE_START_WITHOUT_INITIAL_CONFIG.
func openFiles(s config.Settings, m *metrics.Metrics, log *logrus.Entry) (fileSource, error) {
	reloader, err := config.NewReloader(config.ReloaderOptions{
		Dir:        s.ConfigDir(),
		WatchDir:   s.WatchDir(),
		Load:       s.Loader(),
		Logger:     log,
		OnReload:   func(ok bool, _ error, at time.Time) { m.ObserveReload(ok, at) },
		StartEmpty: s.ForceStartWithoutInitialConfig,
	})
	if err != nil {
		return fileSource{}, fmt.Errorf("load descriptor config: %w", err)
	}
	return fileSource{reloader}, nil
}

// Ready returns at once: the directory loaded when the source opened.
func (fileSource) Ready(context.Context) error { return nil }
