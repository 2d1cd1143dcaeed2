package main

import (
	"context"
	"errors"
	"sync"

	"github.com/sirupsen/logrus"
)

// tasks is a group of background work: each task runs on its own goroutine
// with the group's context, which ends at stop; stop waits for every task
// to return. A task's error, other than its context's end, is logged under
// its name. It is the one way the service starts a goroutine of its own:
// run's group holds the work of the config source and the backend, and a
// backend that does several things at once runs them in a group of its own
// inside its Run, so that run's stop waits for them too.
type tasks struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	log    func(component string) *logrus.Entry
}

// newTasks returns a group whose context ends with parent or at stop.
func newTasks(parent context.Context, log func(component string) *logrus.Entry) *tasks {
	ctx, cancel := context.WithCancel(parent)
	return &tasks{ctx: ctx, cancel: cancel, log: log}
}

// start runs f on a goroutine of the group.
func (t *tasks) start(name string, f func(context.Context) error) {
	t.wg.Go(func() {
		if err := f(t.ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.log(name).WithError(err).Error("background task stopped")
		}
	})
}

// wait returns when every task has returned (they return when the group's
// context ends, or earlier).
func (t *tasks) wait() { t.wg.Wait() }

// stop ends the group's context and waits for every task to return. It may
// be called more than once.
func (t *tasks) stop() {
	t.cancel()
	t.wg.Wait()
}

// runTasks runs each task of named, under its name, in a group under ctx,
// and returns nil once every one has returned (when ctx ends, or earlier).
func runTasks(ctx context.Context, log func(component string) *logrus.Entry, named map[string]func(context.Context) error) error {
	g := newTasks(ctx, log)
	for name, f := range named {
		g.start(name, f)
	}
	g.wait()
	return nil
}
