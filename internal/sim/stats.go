package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// latencyStep is the resolution of the latency histogram; latencies past
// latencySteps of it fall in the last bucket.
const (
	latencyStep  = 50 * time.Microsecond
	latencySteps = 40_000 // 2 s
)

// second is what happened in one simulated second.
type second struct {
	asked, admitted, local, errs atomic.Int64
	writes                       atomic.Int64 // conditional writes of decisions (Observer.Batched)
	// Sampled at the second's end.
	wcu, rcu   float64
	throttled  int
	shards     int   // the first tenant's bucket
	held       int64 // whole tokens the first tenant's bucket holds over its shards
	partitions int
}

// stats are a run's counts. Safe for concurrent use.
type stats struct {
	secs      []second
	latency   [latencySteps + 1]atomic.Int64
	doublings atomic.Int64
	cacheHits atomic.Int64
	contended map[string]int       // by reason (under mu)
	failed    map[string]*failures // errors by reason (under mu; errReason)
	// Per tenant, from Settle on: asked and admitted.
	tAsked, tAdmitted []atomic.Int64
	mu                sync.Mutex
	doubled           []doubling // when, by which replica
}

// doubling is a doubling of a bucket's shards, and the writes the
// replica that started it had made in the second before.
type doubling struct {
	at      time.Duration
	replica int
	writes  int64
}

func newStats(sc Scenario) *stats {
	n := int(sc.Duration/time.Second) + 2
	return &stats{secs: make([]second, n), tAsked: make([]atomic.Int64, sc.Tenants), tAdmitted: make([]atomic.Int64, sc.Tenants)}
}

// sec returns the second that holds t (since the start).
func (s *stats) sec(t time.Duration) *second {
	i := min(int(t/time.Second), len(s.secs)-1)
	return &s.secs[max(i, 0)]
}

// decided records a decision asked at t (since the start) for tenant,
// answered after lat.
func (s *stats) decided(t time.Duration, tenant int, settle time.Duration, admitted, local, failed bool, lat time.Duration) {
	sec := s.sec(t)
	sec.asked.Add(1)
	switch {
	case failed:
		sec.errs.Add(1)
	case admitted:
		sec.admitted.Add(1)
	}
	if local {
		sec.local.Add(1)
	}
	if t >= settle {
		s.tAsked[tenant].Add(1)
		if admitted {
			s.tAdmitted[tenant].Add(1)
		}
	}
	s.latency[min(int(lat/latencyStep), latencySteps)].Add(1)
}

// quantile returns the q-quantile of the decision latency (the upper edge
// of its bucket).
func (s *stats) quantile(q float64) time.Duration {
	var total int64
	for i := range s.latency {
		total += s.latency[i].Load()
	}
	want := int64(q * float64(total))
	var seen int64
	for i := range s.latency {
		seen += s.latency[i].Load()
		if seen > want {
			return time.Duration(i+1) * latencyStep
		}
	}
	return 0
}
