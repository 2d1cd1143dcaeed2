package dynamo

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// behindRecorder is an Observer that keeps the last ClockBehind.
type behindRecorder struct {
	nopObserver
	behind time.Duration
}

func (r *behindRecorder) ClockBehind(d time.Duration) { r.behind = d }

func writtenAt(ms int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{item.AttrWriter: &types.AttributeValueMemberN{Value: strconv.FormatInt(ms, 10)}}
}

// TestSawWriterWindow pins the minute over which the largest offset is
// kept and warned about once: an item received at the window's start again
// keeps it, one a minute less a millisecond on stays in it, one exactly a
// minute on starts the next (and may warn again), and a receiving clock
// that went back starts a new one. An offset of exactly 100 ms warns.
func TestSawWriterWindow(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	rec := &behindRecorder{}
	s := &Store{obs: rec, log: logrus.NewEntry(log)}
	for _, step := range []struct {
		received, wrote int64
		behind          time.Duration
		warnings        int
	}{
		{1000, 1200, 200 * time.Millisecond, 1},
		{1000, 1100, 200 * time.Millisecond, 1},
		{60_999, 60_999, 200 * time.Millisecond, 1},
		{61_000, 61_150, 150 * time.Millisecond, 2},
		{60_999, 60_999, 0, 2},
	} {
		s.sawWriter(writtenAt(step.wrote), step.received)
		if rec.behind != step.behind || len(hook.AllEntries()) != step.warnings {
			t.Fatalf("received at %d, written at %d: behind %v with %d warnings, want %v and %d", step.received, step.wrote, rec.behind, len(hook.AllEntries()), step.behind, step.warnings)
		}
	}

	log, hook = logtest.NewNullLogger()
	s = &Store{obs: &behindRecorder{}, log: logrus.NewEntry(log)}
	s.sawWriter(writtenAt(5100), 5000)
	if n := len(hook.AllEntries()); n != 1 {
		t.Errorf("an offset of exactly %v: %d warnings, want 1", skewWarnAt, n)
	}
}

// TestCacheTTLJitter: a cached record lives ConfigCacheTTL ± 10%, spread
// over the whole range.
func TestCacheTTLJitter(t *testing.T) {
	s := &Store{cfg: Config{ConfigCacheTTL: time.Minute}}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := s.cacheTTL()
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 54*time.Second || hi > 66*time.Second || lo > 55*time.Second || hi < 65*time.Second {
		t.Errorf("cacheTTL() over 2000 draws in [%v, %v], want within [54s, 66s] and reaching past 55s and 65s", lo, hi)
	}
}

// TestMulSat: a·n, saturating at MaxMillitokens, exact just below it.
func TestMulSat(t *testing.T) {
	const max = tokenbucket.MaxMillitokens
	for _, c := range []struct {
		a    tokenbucket.Millitokens
		n    int
		want tokenbucket.Millitokens
	}{
		{2, 3, 6}, {5, 1, 5}, {0, 4, 0}, {-3, 4, -3},
		{max / 3, 3, max / 3 * 3}, {max/3 + 1, 3, max}, {max, 2, max},
	} {
		if got := mulSat(c.a, c.n); got != c.want {
			t.Errorf("mulSat(%d, %d) = %d, want %d", c.a, c.n, got, c.want)
		}
	}
}

// TestLimitsTTLBound: a stored limit record lives 80 to 90% of
// ConfigCacheTTL, spread over the range, and serves stale for a tenth of
// it at most: together never past ConfigCacheTTL.
func TestLimitsTTLBound(t *testing.T) {
	s := &Store{cfg: Config{ConfigCacheTTL: time.Minute}}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := s.limitsTTL()
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 48*time.Second || hi > 54*time.Second || lo > 49*time.Second || hi < 53*time.Second {
		t.Errorf("limitsTTL() over 2000 draws in [%v, %v], want within [48s, 54s] and reaching past 49s and 53s", lo, hi)
	}
	if hi+s.staleGrace() > time.Minute {
		t.Errorf("limitsTTL() %v + staleGrace() %v passes CONFIG_CACHE_TTL", hi, s.staleGrace())
	}
}
