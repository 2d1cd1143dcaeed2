package degrade_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/degrade"
)

// failingHeart fails its first heartbeats (the store warming up), then
// answers, then fails again (DynamoDB gone).
type failingHeart struct {
	mu    sync.Mutex
	calls int
}

func (h *failingHeart) Heartbeat(context.Context, string, time.Duration, []string) (int, []string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.calls <= 5 || h.calls > 6 {
		return 0, nil, errors.New("dynamo: store not open")
	}
	return 2, nil, nil
}

// TestHeartbeatQuietWhileWarming: heartbeats that fail before the first
// one counted the fleet (warm-up) log nothing; one failing after does.
func TestHeartbeatQuietWhileWarming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, hook := logtest.NewNullLogger()
		f := degrade.NewFleet(0)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = f.Beat(ctx, &failingHeart{}, time.Second, logrus.NewEntry(log))
		}()
		time.Sleep(5*250*time.Millisecond - time.Millisecond) // the five failures of warm-up
		synctest.Wait()
		for _, e := range hook.AllEntries() {
			if strings.Contains(e.Message, "heartbeat failed") {
				t.Errorf("logged %q while warming up", e.Message)
			}
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		warned := 0
		for _, e := range hook.AllEntries() {
			if strings.Contains(e.Message, "fleet heartbeat failed") {
				warned++
			}
		}
		if warned != 1 || f.Size() != 2 {
			t.Errorf("after a count and failures: %d warnings, size %d; want 1 warning, size 2 kept", warned, f.Size())
		}
		cancel()
		<-done
	})
}
