package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// configNamespaces returns the namespaces the rules of cfg name, "" (the
// deployment's) always among them.
func configNamespaces(cfg *descriptors.Config) []string {
	out := []string{""}
	if cfg == nil {
		return out
	}
	for _, r := range cfg.Rules() {
		if !slices.Contains(out, r.Namespace) {
			out = append(out, r.Namespace)
		}
	}
	return out
}

// watchNamespaces reads the registry records of the namespaces names
// returns into deleted once w's store is open, then every interval, until
// ctx ends: a namespace deleted with `ratelimit namespace delete` stops
// being decided within the interval, and one recovered is decided again. A
// read that fails keeps the set read last, and is logged.
func watchNamespaces(ctx context.Context, w *warming, deleted *dadmin.DeletedNamespaces, names func() []string, interval time.Duration, log *logrus.Entry) error {
	select {
	case <-w.openedCh():
	case <-ctx.Done():
		return nil
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		before := deleted.Names()
		rctx, cancel := context.WithTimeout(ctx, interval)
		err := deleted.Refresh(rctx, dadmin.New(w.p.Load()), names())
		cancel()
		switch after := deleted.Names(); {
		case err != nil && ctx.Err() == nil:
			log.WithError(err).Warn("namespace registry not read: the namespaces deleted stay as read last")
		case !slices.Equal(before, after):
			log.WithField("deleted", strings.Join(after, ",")).Warn("namespaces deleted in the registry changed: the rules of a deleted namespace are answered as unmatched")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
