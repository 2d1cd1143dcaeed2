package dynamo

import (
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Clock skew between replicas.
//
// Every replica decides on its own clock: at time t a bucket holds
// (t·rate − level)/period, so a replica whose clock runs ahead sees more
// refill than one that is behind, and the fleet can admit up to about
// skew × rate more than the limit (see the clock tests for the exact
// bound). The store cannot correct that, but it can see it: each bucket
// write records the writer's clock (attrWriter, unix ms, taken when the
// batch was decided, before the call) and moves the one it replaces to
// attrPrevWriter, in the same write: the image that comes back after a
// replica's own write (ALL_NEW) still names the writer before it. Each
// bucket item this replica receives (ALL_NEW after a write, ALL_OLD on a
// refused condition, a cold read) is compared with this replica's clock
// when it arrived. A write lands before its item can be received, so, for
// either recorded clock,
//
//	recorded − received = (writer's offset − this replica's offset) − age
//
// where age ≥ 0 is the real time between the writer's decision and the
// receipt (the call's latency included): the difference is never more than
// how far this replica's clock is behind the writer's, and on a bucket that
// several replicas write often it comes close. A replica whose clock is
// ahead, or in step, sees zero or less. Nothing here changes a decision.

const (
	// skewWindow is how long the largest offset seen is reported (and how
	// often, at most, it is logged): a replica reports what it saw over
	// the last window, so an offset that was corrected fades.
	skewWindow = time.Minute
	// skewWarnAt is the offset past which the store logs a warning: at
	// 100 ms behind, a limit of 1,000/s can admit about 100 more than its
	// limit each time its bucket is full.
	skewWarnAt = 100 * time.Millisecond
)

// skewWatch keeps the largest offset seen in the current window.
type skewWatch struct {
	mu       sync.Mutex
	startMs  int64         // when the window began, this replica's clock
	max      time.Duration // the largest offset seen in it
	reported time.Duration // the value the observer holds
	warnedMs int64         // when the last warning was logged (0: never)
}

// sawWriter compares the clocks that the last two writers of item recorded
// with this replica's clock when the item arrived (receivedMs), reports the
// largest offset of the window to the observer when it changes, and warns
// (at most once a window) when it passes skewWarnAt. An item without a
// recorded clock (absent, or written by an older version) says nothing.
func (s *Store) sawWriter(it map[string]types.AttributeValue, receivedMs int64) {
	wrote, ok := item.Number(it[item.AttrWriter])
	if !ok {
		return
	}
	if prev, ok := item.Number(it[item.AttrPrevWriter]); ok {
		wrote = max(wrote, prev)
	}
	ahead := time.Duration(max(wrote-receivedMs, 0)) * time.Millisecond
	w := &s.skew
	w.mu.Lock()
	if w.startMs == 0 || receivedMs-w.startMs >= skewWindow.Milliseconds() || receivedMs < w.startMs {
		w.startMs, w.max = receivedMs, ahead
	} else {
		w.max = max(w.max, ahead)
	}
	cur := w.max
	if cur != w.reported {
		w.reported = cur
		s.obs.ClockBehind(cur) // under the lock, so that reports stay in order
	}
	warn := cur >= skewWarnAt && (w.warnedMs == 0 || receivedMs-w.warnedMs >= skewWindow.Milliseconds() || receivedMs < w.warnedMs)
	if warn {
		w.warnedMs = receivedMs
	}
	w.mu.Unlock()
	if warn {
		s.log.WithField("behind_ms", cur.Milliseconds()).
			Warn("this replica's clock is behind the clock of another replica that writes the same buckets: the fleet can admit up to the offset × a limit's rate more than the limit; check the hosts' time synchronisation")
	}
}
