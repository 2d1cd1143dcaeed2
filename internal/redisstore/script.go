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
	// tags are the hash tags of the debits' keys on a cluster (tagOf);
	// nil elsewhere, each key then under its entity's own.
	tags []string
	// once is the key recording a settlement's ID, keepMs how long it (or a
	// repayment's stamp) is kept.
	once   string
	keepMs int64
	// item, stampField and stamp are a repayment's item, replica field
	// and stamp.
	item       cascade.Key
	itemTag    string
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

// callArgs are the arguments of one call being built: the distinct
// debits of its plans (their specs, 14 arguments each), each sent once
// however many plans repeat it, and the plans, which name their debits'
// specs by number. A hot key's batch of like decisions is then parsed
// once by the script, not once a plan.
type callArgs struct {
	keyIndex func(string) int
	ks       keyspace
	estMs    int64
	u        *windows // nil: usage is not kept
	specs    []string
	index    map[specKey]int
	plans    []string
}

// specKey tells debits apart as the script is told them.
type specKey struct {
	d       cascade.Debit
	restate string
	tag     string
}

// tag is the hash tag of debit i's keys ("" for its entity's own).
func (j *job) tag(i int) string {
	if i < len(j.tags) {
		return j.tags[i]
	}
	return ""
}

// spec returns the number (from 1) of debit d's spec with restatement
// restate, adding it when new.
func (a *callArgs) spec(d *cascade.Debit, restate, tag string) int {
	k := specKey{d: *d, restate: restate, tag: tag}
	if i, ok := a.index[k]; ok {
		return i
	}
	b := d.Bucket
	per := b.RefillPeriod.Milliseconds()
	n := max(d.Amount, 0)
	tooBig := "0"
	if n > b.Capacity {
		tooBig = "1"
	}
	keys := a.ks.itemIn(d.Key, tag)
	uk, res := "", ""
	if a.u != nil {
		uk = strconv.Itoa(a.keyIndex(usageKey(keys.usage, 'h', a.u.hour))) + "," + strconv.Itoa(a.keyIndex(usageKey(keys.usage, 'd', a.u.day))) + "," +
			strconv.Itoa(a.keyIndex(usageKey(keys.usage, 'm', a.u.month))) + "," + strconv.Itoa(a.keyIndex(keys.resources))
		res = d.Key.Resource
	}
	a.specs = append(a.specs,
		strconv.Itoa(a.keyIndex(keys.bucket)), d.Limit, opCode(d.Op), roleCode(d.Role), tooBig,
		strconv.FormatInt(int64(n), 10), tokenbucket.Mul(int64(n), per).String(), tokenbucket.Mul(int64(b.Capacity), per).String(),
		strconv.FormatInt(int64(b.RefillAmount), 10), shape(b), calendarClock(b, a.estMs), restate, uk, res)
	i := len(a.specs) / specArgs
	a.index[k] = i
	return i
}

// specArgs is the number of arguments of one spec.
const specArgs = 14

// add appends j's arguments.
func (a *callArgs) add(j *job) {
	a.plans = append(a.plans, string(j.kind), strconv.Itoa(len(j.debits)))
	switch j.kind {
	case kindSettle:
		a.plans = append(a.plans, strconv.Itoa(a.keyIndex(j.once)), strconv.FormatInt(j.keepMs, 10))
	case kindRepay:
		a.plans = append(a.plans, strconv.Itoa(a.keyIndex(a.ks.bucketIn(j.item, j.itemTag))), j.stampField, strconv.FormatInt(j.stamp, 10), strconv.FormatInt(j.keepMs, 10))
	}
	for i := range j.debits {
		restate := ""
		if j.restate != nil {
			restate = j.restate[i]
		}
		a.plans = append(a.plans, strconv.Itoa(a.spec(&j.debits[i], restate, j.tag(i))))
	}
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
	ca := callArgs{keyIndex: keyIndex, ks: s.keys, estMs: est, index: map[specKey]int{}, plans: make([]string, 0, len(jobs)*4)}
	header := ""
	if s.cfg.UsageRetention > 0 {
		ca.u = windowsAt(est, s.cfg.UsageRetention)
		header = ca.u.header()
	}
	for _, j := range jobs {
		ca.add(j)
	}
	args := make([]string, 0, 4+len(ca.specs)+len(ca.plans))
	args = append(args, clock, header, strconv.Itoa(len(jobs)), strconv.Itoa(len(ca.specs)/specArgs))
	args = append(append(args, ca.specs...), ca.plans...)
	c, err := s.conn()
	if err != nil {
		return err
	}
	if c.Mode() == rueidis.ClientModeCluster && !oneSlot(keys) {
		// The client would panic; the store's parts never get here.
		return fmt.Errorf("%w: a call's keys lie in several cluster slots", errReply)
	}
	msgs, err := decideScript.Exec(ctx, c, keys, args).ToArray()
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return fmt.Errorf("%w: no clock", errReply)
	}
	now, err := msgs[0].AsInt64()
	if err != nil {
		return fmt.Errorf("%w: clock: %w", errReply, err)
	}
	s.observeClock(now)
	rest := msgs[1:]
	for i, j := range jobs {
		var r reply
		r, rest, err = readReply(rest)
		if err != nil {
			return fmt.Errorf("%w: plan %d: %w", errReply, i, err)
		}
		r.nowMs = now
		j.reply = r
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d values past %d plans", errReply, len(rest), len(jobs))
	}
	return nil
}

// readReply reads one plan's reply from the front of msgs (its status, its
// number of values, its values) and returns what follows it.
func readReply(msgs []rueidis.RedisMessage) (reply, []rueidis.RedisMessage, error) {
	if len(msgs) < 2 {
		return reply{}, nil, errors.New("no status")
	}
	status, err := msgs[0].ToString()
	if err != nil {
		return reply{}, nil, err
	}
	n, err := msgs[1].AsInt64()
	if err != nil {
		return reply{}, nil, err
	}
	if n < 0 || n > int64(len(msgs)-2) {
		return reply{}, nil, fmt.Errorf("%d values of %d", n, len(msgs)-2)
	}
	fields, err := replyFields(msgs[2 : 2+n])
	if err != nil {
		return reply{}, nil, err
	}
	return reply{status: status, fields: fields}, msgs[2+n:], nil
}

// pairBase is the base of the low part of a level the script answers as
// two integers.
const pairBase = 100_000_000_000_000

// replyFields reads one plan's values: strings, but for a level the script
// answers as two integers h and l, the decimal string of h·10^14 + l.
func replyFields(arr []rueidis.RedisMessage) ([]string, error) {
	out := make([]string, 0, len(arr))
	for k := 0; k < len(arr); k++ {
		if !arr[k].IsInt64() {
			s, err := arr[k].ToString()
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			continue
		}
		h, _ := arr[k].AsInt64()
		if k+1 == len(arr) || !arr[k+1].IsInt64() {
			return nil, errors.New("a level's high part without its low part")
		}
		k++
		l, _ := arr[k].AsInt64()
		if l < 0 || l >= pairBase {
			return nil, fmt.Errorf("a level's low part %d", l)
		}
		out = append(out, tokenbucket.Mul(h, pairBase).Add(tokenbucket.I128(l)).String())
	}
	return out, nil
}
