package main

import (
	"sync"
	"testing"
	"time"
)

// localSample is the fleet's local decisions at one time.
type localSample struct {
	at    time.Time
	local float64
}

// localSampler samples ratelimit_local_decisions_total, summed over a
// fleet's replicas, every 100 ms.
type localSampler struct {
	mu      sync.Mutex
	samples []localSample
	err     error // the first scrape that failed
	stop    chan struct{}
	done    chan struct{}
}

// sampleLocal starts sampling f's local decisions; Stop ends it (at the
// latest when t ends).
func (f *fleet) sampleLocal(t *testing.T) *localSampler {
	s := &localSampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := func() {
		var sum float64
		for _, p := range f.procs {
			v, err := scrapeErr("http://"+p.DebugAddr()+"/metrics", "ratelimit_local_decisions_total")
			if err != nil {
				s.mu.Lock()
				s.err = cmpErr(s.err, err)
				s.mu.Unlock()
				return
			}
			sum += v
		}
		s.mu.Lock()
		s.samples = append(s.samples, localSample{time.Now(), sum})
		s.mu.Unlock()
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(s.Stop)
	return s
}

// cmpErr is first unless it is nil.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// Stop ends the sampling after one last sample; it may be called again.
func (s *localSampler) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// at returns the local decisions of the last sample at or before at (0
// before the first).
func (s *localSampler) at(at time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := 0.0
	for _, x := range s.samples {
		if x.at.After(at) {
			break
		}
		v = x.local
	}
	return v
}

// last returns the local decisions of the last sample.
func (s *localSampler) last() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return 0
	}
	return s.samples[len(s.samples)-1].local
}

// stoppedAfter returns how long after from the local decisions stopped:
// the time of the first sample from which on they no longer grew, less
// from (0 when they did not grow after from; the whole remaining run,
// ended reports false, when they grew until the last sample).
func (s *localSampler) stoppedAfter(from time.Time) (d time.Duration, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.samples)
	if n == 0 {
		return 0, true
	}
	i := n - 1
	for i > 0 && s.samples[i-1].local == s.samples[n-1].local {
		i--
	}
	if i == n-1 && n > 1 && s.samples[n-2].local != s.samples[n-1].local {
		return s.samples[n-1].at.Sub(from), false
	}
	return max(0, s.samples[i].at.Sub(from)), true
}

// failed returns the first scrape that failed, if any.
func (s *localSampler) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
