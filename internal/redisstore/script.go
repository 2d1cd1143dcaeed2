package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

//go:embed decide.lua
var decideSource string

// decideScript is the one server-side function: EVALSHA, loaded by its
// SHA on first use (EVAL when Redis answers NOSCRIPT).
var decideScript = rueidis.NewLuaScript(decideSource)

// Job kinds, as the script knows them.
const (
	kindDecide = 'd' // a plan, all or nothing
	kindSettle = 's' // a settlement, once per ID
	kindRepay  = 'p' // a repayment, once per replica stamp
)

// job is one plan of a batch: what the script is sent for it and what it
// answered.
type job struct {
	kind   byte
	debits []cascade.Debit
	// once is the key recording a settlement's ID, keepMs how long it (or a
	// repayment's stamp) is kept.
	once   string
	keepMs int64
	// item, stampField and stamp are a repayment's item, replica field
	// and stamp.
	item       cascade.Key
	stampField string
	stamp      int64
	// restate holds, per debit, "" or "stored,restated": the level the
	// caller found stored under another shape, and what it is under the
	// debit's (tokenbucket.Limit.Restate).
	restate []string

	reply reply
	err   error
	done  chan struct{}
	state jobState
}

// reply is what the script answered for one job.
type reply struct {
	nowMs  int64    // Redis's clock when it decided
	status string   // "d1", "d0", "s1", "p1"; "u" done before; "x" restate; "c" calendar clock off
	fields []string // per debit: the level before ("" none, "=" as an earlier debit's); for "x" stored and shape pairs
}

// opCode and roleCode are the script's names of ops and roles.
func opCode(o cascade.Op) string {
	switch o {
	case cascade.Consume:
		return "c"
	case cascade.Check:
		return "k"
	case cascade.Charge:
		return "h"
	case cascade.Refund:
		return "r"
	}
	return "?"
}

func roleCode(r cascade.Role) string {
	switch r {
	case cascade.Advisory:
		return "a"
	case cascade.Quota:
		return "q"
	}
	return "e"
}

// shape names a limit as a level is written under it: a stored level
// under another shape is restated before it is decided on.
func shape(l tokenbucket.Limit) string {
	return strconv.FormatInt(int64(l.Capacity), 10) + "/" + strconv.FormatInt(int64(l.RefillAmount), 10) + "/" +
		strconv.FormatInt(l.RefillPeriod.Milliseconds(), 10) + "/" + l.Calendar.String()
}

// parseShape is shape's inverse.
func parseShape(s string) (tokenbucket.Limit, error) {
	var c, r, p int64
	var cal string
	n, _ := fmt.Sscanf(s, "%d/%d/%d/", &c, &r, &p)
	if n != 3 {
		return tokenbucket.Limit{}, fmt.Errorf("redisstore: stored shape %q", s)
	}
	for i, slashes := 0, 0; i < len(s); i++ {
		if s[i] == '/' {
			if slashes++; slashes == 3 {
				cal = s[i+1:]
				break
			}
		}
	}
	l := tokenbucket.Limit{Capacity: tokenbucket.Millitokens(c), RefillAmount: tokenbucket.Millitokens(r), RefillPeriod: time.Duration(p) * time.Millisecond}
	if cal != "" {
		c, err := tokenbucket.ParseCalendar(cal)
		if err != nil {
			return tokenbucket.Limit{}, fmt.Errorf("redisstore: stored shape %q: %w", s, err)
		}
		l.Calendar = c
	}
	return l, nil
}

// calendarClock is the script's clock of a calendar limit at the caller's
// best estimate of Redis's time: "index,start,end,longest", the period
// holding it, its bounds and a bound on any period's length; "" for a
// limit without a calendar. The script refuses a batch whose clock falls
// outside the period, and the caller tries again at Redis's time.
func calendarClock(l tokenbucket.Limit, estMs int64) string {
	if l.Calendar.IsZero() {
		return ""
	}
	idx := l.Calendar.Index(estMs)
	start, end := l.Calendar.Start(idx), l.Calendar.Start(idx+1)
	longest := 2*(end-start) + 24*time.Hour.Milliseconds()
	return strconv.FormatInt(idx, 10) + "," + strconv.FormatInt(start, 10) + "," + strconv.FormatInt(end, 10) + "," + strconv.FormatInt(longest, 10)
}

// args appends j's arguments to args, its keys' indexes from keyIndex;
// u is the usage windows (nil: usage is not kept).
func (j *job) args(args []string, keyIndex func(string) int, ks keyspace, estMs int64, u *windows) []string {
	args = append(args, string(j.kind), strconv.Itoa(len(j.debits)))
	switch j.kind {
	case kindSettle:
		args = append(args, strconv.Itoa(keyIndex(j.once)), strconv.FormatInt(j.keepMs, 10))
	case kindRepay:
		args = append(args, strconv.Itoa(keyIndex(ks.bucket(j.item))), j.stampField, strconv.FormatInt(j.stamp, 10), strconv.FormatInt(j.keepMs, 10))
	}
	for i := range j.debits {
		d := &j.debits[i]
		b := d.Bucket
		per := b.RefillPeriod.Milliseconds()
		n := max(d.Amount, 0)
		tooBig := "0"
		if n > b.Capacity {
			tooBig = "1"
		}
		restate := ""
		if j.restate != nil {
			restate = j.restate[i]
		}
		keys := ks.item(d.Key)
		uk, res := "", ""
		if u != nil {
			uk = strconv.Itoa(keyIndex(usageKey(keys.usage, 'h', u.hour))) + "," + strconv.Itoa(keyIndex(usageKey(keys.usage, 'd', u.day))) + "," +
				strconv.Itoa(keyIndex(usageKey(keys.usage, 'm', u.month))) + "," + strconv.Itoa(keyIndex(keys.resources))
			res = d.Key.Resource
		}
		args = append(args,
			strconv.Itoa(keyIndex(keys.bucket)), d.Limit, opCode(d.Op), roleCode(d.Role), tooBig,
			strconv.FormatInt(int64(n), 10), tokenbucket.Mul(int64(n), per).String(), tokenbucket.Mul(int64(b.Capacity), per).String(),
			strconv.FormatInt(int64(b.RefillAmount), 10), shape(b), calendarClock(b, estMs), restate, uk, res)
	}
	return args
}

// errReply marks a reply the store cannot read: a script of another
// version, or a bug.
var errReply = errors.New("redisstore: unexpected reply from the decision script")

// exec sends jobs to Redis in one call of the script and fills in their
// replies. An error is the call's: every job failed alike.
func (s *Store) exec(ctx context.Context, jobs []*job) error {
	var keys []string
	index := map[string]int{}
	keyIndex := func(k string) int {
		if i, ok := index[k]; ok {
			return i
		}
		keys = append(keys, k)
		index[k] = len(keys)
		return len(keys)
	}
	est := s.estimate()
	clock := ""
	if s.cfg.Now != nil {
		clock = strconv.FormatInt(est, 10)
	}
	var u *windows
	header := ""
	if s.cfg.UsageRetention > 0 {
		u = windowsAt(est, s.cfg.UsageRetention)
		header = u.header()
	}
	args := make([]string, 0, 3+len(jobs)*20)
	args = append(args, clock, header, strconv.Itoa(len(jobs)))
	for _, j := range jobs {
		args = j.args(args, keyIndex, s.keys, est, u)
	}
	c, err := s.conn()
	if err != nil {
		return err
	}
	msgs, err := decideScript.Exec(ctx, c, keys, args).ToArray()
	if err != nil {
		return err
	}
	if len(msgs) != len(jobs)+1 {
		return fmt.Errorf("%w: %d values for %d plans", errReply, len(msgs), len(jobs))
	}
	now, err := msgs[0].AsInt64()
	if err != nil {
		return fmt.Errorf("%w: clock: %w", errReply, err)
	}
	s.observeClock(now)
	for i, j := range jobs {
		vals, err := msgs[i+1].AsStrSlice()
		if err != nil {
			return fmt.Errorf("%w: plan %d: %w", errReply, i, err)
		}
		if len(vals) == 0 {
			return fmt.Errorf("%w: plan %d: no status", errReply, i)
		}
		j.reply = reply{nowMs: now, status: vals[0], fields: vals[1:]}
	}
	return nil
}
