package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeUnit is a server whose handlers may never finish: stop returns at
// once when graceful, else only when its deadline forces it.
type fakeUnit struct {
	name     string
	stuck    bool  // a handler runs forever: only the deadline stops it
	failWith error // serve fails with it when fail is closed

	fail      chan struct{}
	stopped   chan struct{}
	mu        sync.Mutex
	stopAt    time.Time
	forced    bool
	closeOnce sync.Once
}

func newFakeUnit(name string, stuck bool) *fakeUnit {
	return &fakeUnit{name: name, stuck: stuck, fail: make(chan struct{}), stopped: make(chan struct{})}
}

func (f *fakeUnit) unit() unit {
	return unit{
		name: f.name,
		serve: func() error {
			select {
			case <-f.stopped:
				return nil
			case <-f.fail:
				return f.failWith
			}
		},
		stop: func(ctx context.Context) error {
			f.mu.Lock()
			f.stopAt = time.Now()
			f.mu.Unlock()
			defer f.closeOnce.Do(func() { close(f.stopped) })
			if !f.stuck {
				return nil
			}
			<-ctx.Done()
			f.mu.Lock()
			f.forced = true
			f.mu.Unlock()
			return ctx.Err()
		},
	}
}

func TestSuperviseShutdownIsBoundedByDrainAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const drain, timeout = 5 * time.Second, 10 * time.Second
		grpcU, httpU, debugU := newFakeUnit("grpc", true), newFakeUnit("http", true), newFakeUnit("debug", false)
		ctx, cancel := context.WithCancel(context.Background())
		var notServingAt time.Time
		done := make(chan error, 1)
		go func() {
			done <- supervise(ctx, shutdownPlan{drain: drain, timeout: timeout, notServing: func() { notServingAt = time.Now() }, log: quietLogger()},
				[]unit{grpcU.unit(), httpU.unit(), debugU.unit()})
		}()
		synctest.Wait()
		began := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("supervise() = %v, want nil", err)
		}
		if got := time.Since(began); got != drain+timeout {
			t.Errorf("shutdown took %v, want drain + timeout = %v", got, drain+timeout)
		}
		if notServingAt != began {
			t.Errorf("health NOT_SERVING %v after the signal, want at once", notServingAt.Sub(began))
		}
		for _, u := range []*fakeUnit{grpcU, httpU, debugU} {
			if got := u.stopAt.Sub(began); got != drain {
				t.Errorf("%s: stop began %v after the signal, want with every other server after the drain (%v)", u.name, got, drain)
			}
		}
		if !grpcU.forced || !httpU.forced || debugU.forced {
			t.Errorf("forced stops: grpc %v, http %v, debug %v; want true, true, false", grpcU.forced, httpU.forced, debugU.forced)
		}
	})
}

func TestSuperviseListenerFailureCutsTheDrainShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const drain, timeout = 5 * time.Second, 10 * time.Second
		grpcU, httpU := newFakeUnit("grpc", false), newFakeUnit("http", false)
		httpU.failWith = errors.New("accept: too many open files")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- supervise(ctx, shutdownPlan{drain: drain, timeout: timeout, notServing: func() {}, log: quietLogger()},
				[]unit{grpcU.unit(), httpU.unit()})
		}()
		synctest.Wait()
		began := time.Now()
		cancel()
		time.Sleep(time.Second)
		close(httpU.fail)
		err := <-done
		if err == nil || !errors.Is(err, httpU.failWith) {
			t.Errorf("supervise() = %v, want the http failure", err)
		}
		if got := time.Since(began); got != time.Second {
			t.Errorf("shutdown took %v, want 1s (the drain cut short by the failure)", got)
		}
	})
}

func TestSuperviseListenerFailureStopsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		grpcU, debugU := newFakeUnit("grpc", false), newFakeUnit("debug", false)
		debugU.failWith = errors.New("boom")
		done := make(chan error, 1)
		go func() {
			done <- supervise(context.Background(), shutdownPlan{drain: time.Minute, timeout: time.Minute, notServing: func() {}, log: quietLogger()},
				[]unit{grpcU.unit(), debugU.unit()})
		}()
		synctest.Wait()
		began := time.Now()
		close(debugU.fail)
		if err := <-done; !errors.Is(err, debugU.failWith) {
			t.Errorf("supervise() = %v, want the debug failure", err)
		}
		if got := time.Since(began); got != 0 {
			t.Errorf("stopping after a failure took %v, want no drain", got)
		}
	})
}
