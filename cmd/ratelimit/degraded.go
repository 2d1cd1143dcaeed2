package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/lateness"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/service"
)

// heartbeatInterval is how often a replica records that it is alive
// (ON_UNAVAILABLE=local counts the fleet by it).
const heartbeatInterval = 5 * time.Second

// sharedBackend is a backend on a store the fleet shares (DynamoDB,
// Redis), which a degraded backend wraps.
type sharedBackend interface {
	backend
	warmer
	// shared is the store degrade decides on and repays to.
	shared() degrade.Shared
	// heart returns the store heartbeats are recorded in once it is open;
	// nil if ctx ends first.
	heart(ctx context.Context) degrade.Heart
}

// degradedBackend is a shared store under ON_UNAVAILABLE=local: what the
// store cannot decide, this replica decides on its share of the fleet,
// through internal/degrade, which repays in the background; the fleet is
// counted by heartbeats unless FLEET_SIZE fixes it.
type degradedBackend struct {
	sharedBackend
	local *degrade.Store
	fleet *degrade.Fleet
	ns    string // the store's own namespace (NAMESPACE)
	// log names the replica and the fleet size.
	log *logrus.Entry
}

var _ backend = (*degradedBackend)(nil)

// degraded makes b decide on this replica's share when its store cannot;
// an item that degrades while this process runs late by a quarter of
// BACKEND_TIMEOUT or more (late) is tried again at once.
func degraded(b sharedBackend, s config.Settings, reg prometheus.Registerer, late *lateness.Meter, log *logrus.Entry) *degradedBackend {
	fleet := degrade.NewFleet(s.FleetSize)
	metrics.RegisterFleetSize(reg, fleet.Size)
	log = log.WithFields(logrus.Fields{"replica": fleet.ID(), "fleet_size": s.FleetSize})
	return &degradedBackend{
		sharedBackend: b,
		local: degrade.New(b.shared(), degrade.Config{
			ID: fleet.ID(), Share: fleet.Size, Settled: fleet.Settled, Answered: fleet.Answered, Observer: metrics.DegradeObserver(reg), Drain: s.ShutdownTimeout, Log: log,
			Late: func() bool { return late.Late(s.BackendTimeout) },
		}),
		fleet: fleet,
		ns:    s.Namespace,
		log:   log,
	}
}

// Store decides on the shared store, or locally what it cannot.
func (b *degradedBackend) Store() service.Store { return b.local }

// Operator is the wrapped backend's operator stores, with bucket show
// told which items this replica decides locally now.
func (b *degradedBackend) Operator() admin.Stores {
	st := b.sharedBackend.Operator()
	st.Local = admin.LocalIn(b.local, b.ns)
	return st
}

// Run does the store's own work, repays what was decided locally, and
// beats the fleet's heartbeat, until ctx ends.
func (b *degradedBackend) Run(ctx context.Context) error {
	return runTasks(ctx, b.taskLog, map[string]func(context.Context) error{
		"store":     b.sharedBackend.Run,
		"repay":     b.local.Run,
		"heartbeat": b.beat,
	})
}

// beat records this replica in the fleet record once the store is open,
// every heartbeatInterval, until ctx ends (degrade.Fleet.Beat).
func (b *degradedBackend) beat(ctx context.Context) error {
	h := b.heart(ctx)
	if h == nil {
		return nil
	}
	return b.fleet.Beat(ctx, h, heartbeatInterval, b.log)
}

func (b *degradedBackend) taskLog(name string) *logrus.Entry { return b.log.WithField("task", name) }

// watch is the wrapped backend's, when it watches its readiness.
func (b *degradedBackend) watch(ctx context.Context, ready func(ok bool)) error {
	if w, ok := b.sharedBackend.(watcher); ok {
		return w.watch(ctx, ready)
	}
	return nil
}
