package main

import (
	"context"
	"slices"
	"strings"
	"time"

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

// watchNamespaces reads the registry records of the namespaces b.names
// returns into b.deleted once the store is open, then every b.reread,
// until ctx ends: a namespace deleted with `ratelimit namespace delete`
// stops being decided within the interval, and one recovered is decided
// again. A read that fails keeps the set read last, and is logged.
func (b *dynamoBackend) watchNamespaces(ctx context.Context) error {
	st := b.w.await(ctx)
	if st == nil {
		return nil
	}
	t := time.NewTicker(b.reread)
	defer t.Stop()
	for {
		before := b.deleted.Names()
		rctx, cancel := context.WithTimeout(ctx, b.reread)
		err := b.deleted.Refresh(rctx, dadmin.New(st), b.names())
		cancel()
		switch after := b.deleted.Names(); {
		case err != nil && ctx.Err() == nil:
			b.log.WithError(err).Warn("namespace registry not read: the namespaces deleted stay as read last")
		case !slices.Equal(before, after):
			b.log.WithField("deleted", strings.Join(after, ",")).Warn("namespaces deleted in the registry changed: the rules of a deleted namespace are answered as unmatched")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
