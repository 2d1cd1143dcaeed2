package server

import (
	"slices"
	"sync"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// SetReady reports whether the service has what WaitReady waits for (a
// configuration with at least one domain). Health follows it while Run
// serves; before Run it sets where health starts. Without WaitReady it does
// nothing. Safe for concurrent use.
func (s *Server) SetReady(ok bool) { s.ready.set(gateConfig, ok) }

// Ready reports that the condition name of Options.Await is met (ok) or not.
// Health is SERVING while every awaited condition is met (and WaitReady's,
// when set). A name Await does not list is ignored. Safe for concurrent use.
func (s *Server) Ready(name string, ok bool) { s.ready.set(name, ok) }

// gateConfig is WaitReady's condition.
const gateConfig = "configuration loaded"

// readiness gates health on conditions: WaitReady's and Options.Await's.
// Once Run's shutdown has turned health NOT_SERVING, grpc's health server
// ignores further changes, so a late Ready cannot revive it.
type readiness struct {
	mu      sync.Mutex
	h       *health.Server
	met     map[string]bool // every gated condition, met or not
	started bool
}

// gate adds a condition health waits for, unmet; before start only.
func (r *readiness) gate(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.met == nil {
		r.met = map[string]bool{}
	}
	if _, ok := r.met[name]; !ok {
		r.met[name] = false
	}
}

func (r *readiness) start(h *health.Server) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h, r.started = h, true
	r.apply()
}

func (r *readiness) set(name string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, gated := r.met[name]; !gated {
		return
	}
	r.met[name] = ok
	if r.started {
		r.apply()
	}
}

// waiting returns the conditions not met yet, sorted.
func (r *readiness) waiting() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for name, ok := range r.met {
		if !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func (r *readiness) apply() {
	st := healthpb.HealthCheckResponse_SERVING
	for _, ok := range r.met {
		if !ok {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	r.h.SetServingStatus("", st)
	r.h.SetServingStatus(rlsName, st)
}
