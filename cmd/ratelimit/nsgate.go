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

// registryWatch is a backend's gate (service.NamespaceGate): the
// namespaces its store's registry marks deleted or purged, among those
// the live rules name, as last read.
type registryWatch struct {
	// deleted holds the namespaces the registry marks deleted, reread
	// every reread for the namespaces names returns.
	deleted *dadmin.DeletedNamespaces
	names   func() []string
	reread  time.Duration
	log     *logrus.Entry
}

// newRegistryWatch returns the gate of a deployment of namespace
// deployment (NAMESPACE), empty until it runs.
func newRegistryWatch(deployment string, names func() []string, reread time.Duration, log *logrus.Entry) registryWatch {
	return registryWatch{deleted: dadmin.NewDeletedNamespaces(deployment), names: names, reread: reread, log: log}
}

// run reads the registry records of the namespaces w.names returns into
// w.deleted through reg, now and then every w.reread, until ctx ends: a
// namespace deleted with `ratelimit namespace delete` stops being
// decided within the interval, and one recovered is decided again. A
// read that fails keeps the set read last, and is logged.
func (w registryWatch) run(ctx context.Context, reg dadmin.StateReader) error {
	t := time.NewTicker(w.reread)
	defer t.Stop()
	for {
		before := w.deleted.Names()
		rctx, cancel := context.WithTimeout(ctx, w.reread)
		err := w.deleted.Refresh(rctx, reg, w.names())
		cancel()
		switch after := w.deleted.Names(); {
		case err != nil && ctx.Err() == nil:
			w.log.WithError(err).Warn("namespace registry not read: the namespaces deleted stay as read last")
		case !slices.Equal(before, after):
			w.log.WithField("deleted", strings.Join(after, ",")).Warn("namespaces deleted in the registry changed: the rules of a deleted namespace are answered as unmatched")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// watchNamespaces follows the DynamoDB table's registry once the store is
// open (registryWatch.run).
func (b *dynamoBackend) watchNamespaces(ctx context.Context) error {
	st := b.w.await(ctx)
	if st == nil {
		return nil
	}
	return b.gate.run(ctx, dadmin.New(st))
}
