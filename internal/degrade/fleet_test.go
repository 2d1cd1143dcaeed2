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
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
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

// TestFleetLeaves: a replica whose Beat ends leaves the fleet record, so
// the others count it out at their next beat, not when its time passes
// (three intervals).
func TestFleetLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := dynamotest.NewFake()
		if err := admin.CreateTable(ctx, f, "t"); err != nil {
			t.Fatal(err)
		}
		var fleets [2]*degrade.Fleet
		var stops [2]context.CancelFunc
		var done [2]chan struct{}
		for i := range fleets {
			s, err := dynamo.NewStore(ctx, f, dynamo.Config{Table: "t", Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			fleets[i] = degrade.NewFleet(0)
			var bctx context.Context
			bctx, stops[i] = context.WithCancel(ctx)
			done[i] = make(chan struct{})
			go func() {
				defer close(done[i])
				_ = fleets[i].Beat(bctx, s, 5*time.Second, logrus.NewEntry(logrus.New()))
			}()
		}
		time.Sleep(3 * time.Second) // beats every second while the count changes
		synctest.Wait()
		if a, b := fleets[0].Size(), fleets[1].Size(); a != 2 || b != 2 {
			t.Fatalf("sizes %d and %d; want 2 and 2", a, b)
		}
		stops[1]()
		<-done[1]
		time.Sleep(1100 * time.Millisecond) // the other's next beat, well within its time of 15 s
		synctest.Wait()
		if n := fleets[0].Size(); n != 1 {
			t.Errorf("a second after one replica stopped, the other counts %d; want 1", n)
		}
		stops[0]()
		<-done[0]
	})
}
