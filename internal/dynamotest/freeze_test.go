package dynamotest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// TestFreeze: a frozen Fake answers nothing until the freeze ends. A call
// in flight as it begins and one sent during it both land and answer
// after it; one whose context ends during it returns the context's error
// and has no effect; a call after it answers in its latency again.
func TestFreeze(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeTable(t)
		f.SetOptions(Options{Latency: Latency{Read: Dist{P50: 10 * time.Millisecond}, Write: Dist{P50: 10 * time.Millisecond}}})
		start := time.Now()
		answered := make(chan time.Duration, 2)
		update := func() {
			if _, err := f.UpdateItem(context.Background(), addOne("k")); err != nil {
				t.Errorf("UpdateItem() = %v", err)
			}
			answered <- time.Since(start)
		}
		go update() // in flight: takes effect at 5 ms
		time.Sleep(2 * time.Millisecond)
		f.Freeze(time.Second)
		time.Sleep(time.Millisecond)
		go update() // sent during the freeze
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := f.UpdateItem(ctx, addOne("gone")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("UpdateItem() with a 100 ms deadline in a freeze = %v, want the deadline's error", err)
		}
		time.Sleep(400 * time.Millisecond)
		if c := attr(t, f, "k", "c"); c != "" {
			t.Errorf("c = %q half a second into the freeze, want nothing landed", c)
		}
		for range 2 {
			if at := <-answered; at < time.Second+2*time.Millisecond {
				t.Errorf("a call answered %v after the start, want after the freeze's end (1.002 s)", at)
			}
		}
		if c, gone := attr(t, f, "k", "c"), attr(t, f, "gone", "c"); c != "2" || gone != "" {
			t.Errorf("after the freeze c = %q, the cancelled call's c = %q, want 2 and nothing", c, gone)
		}
		before := time.Now()
		if _, err := f.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"), Key: keyOfPK("k")}); err != nil || time.Since(before) != 10*time.Millisecond {
			t.Errorf("GetItem() after the freeze = %v in %v, want an answer in 10 ms", err, time.Since(before))
		}
	})
}
