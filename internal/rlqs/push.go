package rlqs

import (
	"context"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
)

// Between its reports, a stream is sent the new assignments that a call
// for a bucket brought (the fleet's demand read anew: a slot's charge, or
// a read for another stream's report): pushes. The
// charge computes them under the bucket's lock and leaves them in the
// stream's outbox, one per watch (a later one replaces an earlier), and
// the stream's pusher sends them, so that a slow stream holds up no
// charge.

// outbox is a stream's pushes not sent yet.
type outbox struct {
	mu      sync.Mutex
	actions map[*watch]*action
	ready   chan struct{} // signalled when actions holds some
	// sendMu serializes the stream's sends: its answers and its pushes.
	sendMu sync.Mutex
}

func newOutbox() *outbox {
	return &outbox{actions: map[*watch]*action{}, ready: make(chan struct{}, 1)}
}

// put leaves a for w, replacing what was there.
func (o *outbox) put(w *watch, a *action) {
	o.mu.Lock()
	o.actions[w] = a
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// forget drops what is left for w (its watch ended).
func (o *outbox) forget(w *watch) {
	o.mu.Lock()
	delete(o.actions, w)
	o.mu.Unlock()
}

// take empties the outbox.
func (o *outbox) take() []*action {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.actions) == 0 {
		return nil
	}
	out := make([]*action, 0, len(o.actions))
	for w, a := range o.actions {
		out = append(out, a)
		delete(o.actions, w)
	}
	return out
}

// send sends resp on the stream, one send at a time.
func (o *outbox) send(send func(*response) error, resp *response) error {
	o.sendMu.Lock()
	defer o.sendMu.Unlock()
	return send(resp)
}

// pushLoop sends the outbox's actions as they come, until done or ctx
// ends, or a send fails (the stream is then ending).
func (o *outbox) pushLoop(ctx context.Context, done <-chan struct{}, send func(*response) error) {
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-o.ready:
		}
		if as := o.take(); len(as) > 0 {
			if o.send(send, &response{BucketAction: as}) != nil {
				return
			}
		}
	}
}

// pushAll computes, after a call for e, each member's assignment
// from what the charge read, and leaves the ones that changed in their
// streams' outboxes. e.mu held.
func (e *entry) pushAll(s *Server) {
	st := &e.state
	q := &st.q
	if !st.known || !q.Matched || q.Unlimited || q.Shadow || q.Deny || len(q.Limits) == 0 {
		return
	}
	for _, w := range e.members {
		if w.rate < 0 || w.stream == nil {
			continue // a provisional share stands until the stream reports
		}
		v := e.viewOf(w)
		g, frac, _ := v.share(s.o.TTL)
		if last := w.grant; w.steady(g) == last {
			continue
		}
		s.o.Observer.Share(frac)
		if s.o.Logger.Logger.IsLevelEnabled(logrus.DebugLevel) {
			s.o.Logger.WithFields(logrus.Fields{
				"stream": fmt.Sprintf("%p", w.stream), "own": v.own, "local": v.local, "fleet": v.fleet, "fraction": frac,
				"tokens_per_fill": w.grant.tokensPerFill, "fill_interval": w.grant.fillInterval, "max_tokens": w.grant.maxTokens,
			}).Debug("rlqs push")
		}
		w.stream.outbox.put(w, w.stream.pushed(tokenBucket(w.id, w.grant, s.o.TTL), kindTokenBucket))
	}
}
