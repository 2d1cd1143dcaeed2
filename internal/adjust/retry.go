package adjust

import (
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Backoff between the tries of a kept settlement.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// keep retries st in the background until the store takes it, it turns
// out a duplicate, its lease expires or the Adjuster closes; past
// MaxPending it is dropped at once. A drop is counted failed and logged.
func (a *Adjuster) keep(path string, st *settling, err error) {
	if errors.Is(err, cascade.ErrInvalid) {
		a.drop(path, st, err, "the store cannot apply it")
		return
	}
	// Counted and registered under the lock Close takes, so that Close
	// waits for every retry it let start, and none starts after it.
	a.mu.Lock()
	closed, full := a.closed, a.pending >= MaxPending
	if !closed && !full {
		a.pending++
		a.retries.Add(1)
	}
	a.mu.Unlock()
	switch {
	case closed:
		a.drop(path, st, err, "the service stopped before the store took it")
		return
	case full:
		a.drop(path, st, err, "too many settlements waiting for the store")
		return
	}
	go func() {
		defer a.retries.Done()
		defer func() {
			a.mu.Lock()
			a.pending--
			a.mu.Unlock()
		}()
		a.retry(path, st, err)
	}()
}

// retry tries st again with a growing backoff while its lease lives.
func (a *Adjuster) retry(path string, st *settling, err error) {
	wait := minBackoff
	for {
		left := st.Expires.Sub(a.o.Now())
		if left <= 0 {
			a.drop(path, st, err, "its lease expired before the store took it")
			return
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-a.life.Done():
			t.Stop()
			a.drop(path, st, err, "the service stopped before the store took it")
			return
		case <-t.C:
		}
		if _, err = a.apply(a.life, path, st); err == nil {
			return
		}
		if errors.Is(err, cascade.ErrInvalid) {
			a.drop(path, st, err, "the store cannot apply it")
			return
		}
		wait = min(2*wait, maxBackoff)
	}
}

// drop gives up on st: counted failed and logged.
func (a *Adjuster) drop(path string, st *settling, err error, why string) {
	a.o.Metrics.Adjusted(path, metrics.AdjustFailed, 0, 0)
	a.o.Log.WithError(err).WithFields(logrus.Fields{
		"lease": st.ID, "path": path, "debits": len(st.Debits),
	}).Warn("settlement dropped: " + why)
}

// Pending returns the settlements kept for a retry.
func (a *Adjuster) Pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending
}
