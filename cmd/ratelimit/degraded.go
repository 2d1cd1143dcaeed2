package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/degrade"
	"github.com/dynalimit/dynalimit/internal/lateness"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/service"
)

// heartbeatInterval is how often a replica records that it is alive
// (ON_UNAVAILABLE=local counts the fleet by it).
const heartbeatInterval = 5 * time.Second

// degradedBackend is DynamoDB under ON_UNAVAILABLE=local: what DynamoDB
// cannot decide, this replica decides on its share of the fleet, through
// internal/degrade, which repays in the background; the fleet is
// counted by heartbeats unless FLEET_SIZE fixes it.
type degradedBackend struct {
	*dynamoBackend
	local *degrade.Store
	fleet *degrade.Fleet
	// log names the replica and the fleet size.
	log *logrus.Entry
}

var _ backend = (*degradedBackend)(nil)

// degraded makes b decide on this replica's share when DynamoDB cannot;
// an item that degrades while this process runs late by a quarter of
// BACKEND_TIMEOUT or more (late) is tried again at once.
func degraded(b *dynamoBackend, s config.Settings, reg prometheus.Registerer, late *lateness.Meter) *degradedBackend {
	fleet := degrade.NewFleet(s.FleetSize)
	metrics.RegisterFleetSize(reg, fleet.Size)
	log := b.log.WithFields(logrus.Fields{"replica": fleet.ID(), "fleet_size": s.FleetSize})
	return &degradedBackend{
		dynamoBackend: b,
		local: degrade.New(b.w, degrade.Config{
			ID: fleet.ID(), Share: fleet.Size, Settled: fleet.Settled, Answered: fleet.Answered, Observer: metrics.DegradeObserver(reg), Drain: s.ShutdownTimeout, Log: log,
			Late: func() bool { return late.Late(s.BackendTimeout) },
		}),
		fleet: fleet,
		log:   log,
	}
}

// Store decides on DynamoDB, or locally what DynamoDB cannot.
func (b *degradedBackend) Store() service.Store { return b.local }

// Run follows the namespace registry, repays what was decided
// locally, and beats the fleet's heartbeat, until ctx ends.
func (b *degradedBackend) Run(ctx context.Context) error {
	return runTasks(ctx, b.taskLog, map[string]func(context.Context) error{
		"namespaces": b.dynamoBackend.Run,
		"repay":      b.local.Run,
		"heartbeat":  b.beat,
	})
}

// beat records this replica in the fleet record once the store is open,
// every heartbeatInterval, until ctx ends (degrade.Fleet.Beat).
func (b *degradedBackend) beat(ctx context.Context) error {
	st := b.w.await(ctx)
	if st == nil {
		return nil
	}
	return b.fleet.Beat(ctx, st, heartbeatInterval, b.log)
}

func (b *degradedBackend) taskLog(name string) *logrus.Entry { return b.log.WithField("task", name) }
