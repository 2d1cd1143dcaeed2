package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// unit is one server as the supervisor sees it.
type unit struct {
	name string
	// serve blocks until the server stops; it returns nil when stop stopped
	// it, or why it failed.
	serve func() error
	// stop stops the server gracefully, and forcibly once ctx ends; it
	// returns promptly after ctx ends, whatever its handlers do, with
	// ctx's error if the stop was forced.
	stop func(ctx context.Context) error
}

// shutdownPlan is what the supervisor does when it is time to stop.
type shutdownPlan struct {
	drain, timeout time.Duration
	notServing     func()
	log            *logrus.Entry
}

// supervise owns every server goroutine: it serves each unit until ctx ends
// or one of them fails, then turns health NOT_SERVING, keeps serving for
// the drain (cut short if a server fails meanwhile), and stops every unit
// at once under one timeout. It returns when every goroutine it started has
// ended, at most drain + timeout after ctx ends (plus what stop needs to
// close connections), with the first serving error, or nil.
func supervise(ctx context.Context, p shutdownPlan, units []unit) error {
	failed := make(chan error, len(units))
	var serving sync.WaitGroup
	for _, u := range units {
		serving.Go(func() {
			if err := u.serve(); err != nil {
				failed <- fmt.Errorf("server: serve %s: %w", u.name, err)
			}
		})
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
		p.log.WithError(err).Error("listener failed; shutting down")
	}
	p.notServing()
	if err == nil && p.drain > 0 {
		p.log.WithField("drain", p.drain.String()).Info("health NOT_SERVING; draining")
		drain := time.NewTimer(p.drain)
		select {
		case <-drain.C:
		case err = <-failed:
			drain.Stop()
			p.log.WithError(err).Error("listener failed while draining; stopping now")
		}
	}

	stopCtx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	var stopping sync.WaitGroup
	for _, u := range units {
		stopping.Go(func() {
			if err := u.stop(stopCtx); err != nil {
				p.log.WithError(err).WithFields(logrus.Fields{"listener": u.name, "timeout": p.timeout.String()}).
					Warn("graceful stop timed out; connections closed")
			}
		})
	}
	stopping.Wait()
	serving.Wait()
	return err
}
