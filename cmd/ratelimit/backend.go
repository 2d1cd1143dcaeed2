package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/lateness"
	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/internal/tracing"
)

// backend is the store the service decides on, with its background work
// and its release: the embedded store (memoryBackend), DynamoDB
// (dynamoBackend), or DynamoDB deciding on this replica's share what it
// cannot (degradedBackend).
type backend interface {
	// Store decides the service's plans.
	Store() service.Store
	// Settler applies lease settlements, once per lease.
	Settler() adjust.Settler
	// Hierarchy gives stored entity ancestors; nil when the chains are the
	// configuration's alone (the embedded store).
	Hierarchy() service.Hierarchy
	// Gate holds the namespaces the registry marks deleted; nil without a
	// registry (the embedded store).
	Gate() service.NamespaceGate
	// Run does the backend's background work until ctx ends. Every
	// goroutine it starts has returned when it returns.
	Run(ctx context.Context) error
	// Close releases the store. It is called once, after Run has returned
	// (or when Run was never started).
	Close() error
	// Operator is the store as the operator's commands see it (the admin
	// API): the jobs it keeps, on the serving store.
	Operator() admin.Stores
}

// warmer is a backend that readies its store before the service reports
// ready (DynamoDB, Redis).
type warmer interface {
	// Warmup readies the store; health says NOT_SERVING, awaiting
	// warmupCondition, until it returns nil. It retries what may recover,
	// and returns an error only for what cannot (a missing table, a table
	// of another schema, a setting that is wrong): the service then stops.
	// It returns nil when ctx ends.
	Warmup(ctx context.Context) error
	// warmupCondition is what health awaits until Warmup returns.
	warmupCondition() string
}

// dynamoWarmup is what health awaits while DynamoDB warms up.
const dynamoWarmup = "dynamodb warm-up (BACKEND_WARMUP_TIMEOUT)"

// backendOptions are what openBackend builds a backend from.
type backendOptions struct {
	settings config.Settings
	metrics  *metrics.Metrics
	reg      prometheus.Registerer
	tracing  *tracing.Provider
	// late measures how late this process runs (nil: not measured).
	late *lateness.Meter
	// names returns the namespaces the live rules name ("" among them):
	// the namespace registry records a DynamoDB or Redis backend follows.
	names func() []string
	log   *logrus.Entry
}

// openBackend returns the backend BACKEND_TYPE names; ctx bounds what
// opening it does at once (loading the AWS configuration).
func openBackend(ctx context.Context, o backendOptions) (backend, error) {
	switch o.settings.BackendType {
	case config.BackendMemory:
		return openMemory(o), nil
	case config.BackendDynamoDB:
		return openDynamo(ctx, o)
	case config.BackendRedis:
		return openRedis(o), nil
	}
	return nil, fmt.Errorf("BACKEND_TYPE %q: want memory, dynamodb or redis", o.settings.BackendType)
}
