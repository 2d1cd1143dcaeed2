package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The operator's view of a bucket: read, reset to full and topped up, at
// Redis's clock. A reset or a top-up reads the bucket's levels, then
// writes the new ones in one call of a small script that writes them only
// if they are still the ones read (else it reads again), so that what it
// reports the bucket held is exactly what it replaced.

// inspectScript reads a bucket hash's level fields (ARGV[2] 'r'), or
// writes levels if they are as read ('w': ARGV[3] how long the key must
// live at least, in ms, then per level its limit's name, the level and
// shape read (empty for none) and the new ones). ARGV[1] is the clock (empty
// for Redis's TIME). It answers the clock, then for 'r' the level fields
// (field, value, ...), for 'w' 1 when it wrote, 0 when a level changed
// meanwhile.
var inspectScript = rueidis.NewLuaScript(`
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if ARGV[2] == 'w' then
  for i = 4, #ARGV, 5 do
    local v = redis.call('HMGET', KEYS[1], 'x' .. ARGV[i], 's' .. ARGV[i])
    if (v[1] or '') ~= ARGV[i + 1] or (v[2] or '') ~= ARGV[i + 2] then return { now, 0 } end
  end
  for i = 4, #ARGV, 5 do
    redis.call('HSET', KEYS[1], 'x' .. ARGV[i], ARGV[i + 3], 's' .. ARGV[i], ARGV[i + 4])
  end
  local ms = tonumber(ARGV[3])
  if redis.call('PTTL', KEYS[1]) < ms then redis.call('PEXPIRE', KEYS[1], ms) end
  return { now, 1 }
end
local all = redis.call('HGETALL', KEYS[1])
local out = { now }
for i = 1, #all, 2 do
  local c = string.sub(all[i], 1, 1)
  if c == 'x' or c == 's' then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
`)

// LimitLevel is what one limit of a bucket holds.
type LimitLevel struct {
	// Name is the limit's name.
	Name string
	// Limit is the limit the level is read with: the one given for its
	// name (a level stored under another is restated to it, as a decision
	// would), else the one it was written with.
	Limit tokenbucket.Limit
	// Tokens is what the limit holds, negative in debt.
	Tokens tokenbucket.Millitokens
	// FullIn is how long until the limit is full again.
	FullIn time.Duration
	// Stored reports whether the bucket holds a level for the limit; a
	// limit without one is full.
	Stored bool
}

// Levels is what a bucket holds at Redis's clock.
type Levels struct {
	// At is Redis's clock when it was read (Config.Now's when set).
	At time.Time
	// Limits are the limits the bucket holds a level of and the others
	// given (full), by name.
	Limits []LimitLevel
}

// Has reports whether the bucket holds a level of, or was given, the
// limit named name.
func (l Levels) Has(name string) bool {
	for _, x := range l.Limits {
		if x.Name == name {
			return true
		}
	}
	return false
}

// Stored reports whether the bucket holds a level of some limit.
func (l Levels) Stored() bool {
	for _, x := range l.Limits {
		if x.Stored {
			return true
		}
	}
	return false
}

// ErrNoSuchLimit is TopUp's error for a limit the bucket neither holds
// nor was given.
var ErrNoSuchLimit = errors.New("redisstore: the bucket holds no limit of that name")

// ErrInvalidAmount is TopUp's error for an amount not between 1 millitoken
// and tokenbucket.MaxMillitokens.
var ErrInvalidAmount = fmt.Errorf("redisstore: a top-up is between 1 millitoken and %d", tokenbucket.MaxMillitokens)

// rewriteTries bounds the tries of a reset or a top-up whose levels
// change between its read and its write.
const rewriteTries = 8

// maxKeepMs bounds how long a top-up makes a bucket's key live (a level
// full beyond it is kept as long, as FullAt saturates).
const maxKeepMs = int64(1) << 50

// Bucket returns what key's bucket holds at Redis's clock: every limit it
// stores a level of, and every other of limits (full). It writes nothing.
func (s *Store) Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (Levels, error) {
	now, fields, err := s.inspect(ctx, key)
	if err != nil {
		return Levels{}, err
	}
	return levelsOf(fields, limits, now), nil
}

// Reset refills key's bucket to full: every limit it stores a level of,
// under the limit it is read with (Levels). It returns what the bucket
// held as it was, and false, with no write, when it stored no level (it
// was full). Its other fields (repayment stamps) are kept, and so is its
// usage.
func (s *Store) Reset(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (Levels, bool, error) {
	return s.rewrite(ctx, key, limits, func(fields map[string]string, _ Levels, now int64) ([]levelWrite, error) {
		var out []levelWrite
		for f, x := range fields {
			if !strings.HasPrefix(f, "x") {
				continue
			}
			name := f[1:]
			l, _, ok := restated(x, fields["s"+name], limits[name], now)
			if !ok {
				continue
			}
			out = append(out, levelWrite{name: name, was: x, wasShape: fields["s"+name], x: l.Full(now).X.String(), shape: shape(l), keepMs: 1000})
		}
		return out, nil
	})
}

// TopUp credits amount millitokens to the limit named name of key's
// bucket, never above its capacity (for a calendar budget, within its
// current period), as a refund does, and returns what the bucket held
// before; false, with no write, when it stores no level of the limit (it
// is full). A limit neither stored nor in limits is an error wrapping
// ErrNoSuchLimit. The credit is not counted as usage.
func (s *Store) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (Levels, bool, error) {
	if amount <= 0 || amount > tokenbucket.MaxMillitokens {
		return Levels{}, false, ErrInvalidAmount
	}
	return s.rewrite(ctx, key, limits, func(fields map[string]string, before Levels, now int64) ([]levelWrite, error) {
		if !before.Has(name) {
			return nil, fmt.Errorf("%w: %q", ErrNoSuchLimit, name)
		}
		stored, was := fields["x"+name], fields["s"+name]
		if stored == "" {
			return nil, nil
		}
		l, x, ok := restated(stored, was, limits[name], now)
		if !ok {
			return nil, fmt.Errorf("redisstore: top up: the level of %q cannot be read (%q under %q)", name, stored, was)
		}
		v := tokenbucket.Stored(x)
		l.Refund(&v, amount, now)
		keep := min(max(l.FullAt(v.State())-now, 0), maxKeepMs) + 1000
		return []levelWrite{{name: name, was: stored, wasShape: was, x: v.State().X.String(), shape: shape(l), keepMs: keep}}, nil
	})
}

// levelWrite is one level a reset or a top-up writes: name's, if it is
// still was (under wasShape), as x (under shape); the key then lives
// keepMs at least.
type levelWrite struct {
	name, was, wasShape, x, shape string
	keepMs                        int64
}

// rewrite reads key's bucket and writes the levels change returns for it
// (none: nothing to write), again while they changed meanwhile. It
// returns the bucket as it was when written, and whether it wrote.
func (s *Store) rewrite(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit, change func(fields map[string]string, before Levels, now int64) ([]levelWrite, error)) (Levels, bool, error) {
	for try := 1; ; try++ {
		now, fields, err := s.inspect(ctx, key)
		if err != nil {
			return Levels{}, false, err
		}
		before := levelsOf(fields, limits, now)
		ws, err := change(fields, before, now)
		if err != nil || len(ws) == 0 {
			return before, false, err
		}
		wrote, err := s.write(ctx, key, ws)
		if err != nil {
			return Levels{}, false, err
		}
		if wrote {
			return before, true, nil
		}
		if try >= rewriteTries {
			return Levels{}, false, fmt.Errorf("redisstore: the bucket changed %d times while it was written: %w", try, cascade.ErrContended)
		}
	}
}

// restated is a stored level (x, written under the shape was) as it
// stands under given (when valid) or else under the limit it was written
// with; false when it cannot be read.
func restated(x, was string, given tokenbucket.Limit, nowMs int64) (tokenbucket.Limit, tokenbucket.State, bool) {
	level, err := tokenbucket.ParseInt128(x)
	if err != nil {
		return tokenbucket.Limit{}, tokenbucket.State{}, false
	}
	from, err := parseShape(was)
	if err != nil || from.Validate() != nil {
		return tokenbucket.Limit{}, tokenbucket.State{}, false
	}
	st := tokenbucket.State{X: level}
	if given.Validate() != nil || shape(given) == was {
		return from, st, true
	}
	return given, given.Restate(st, from, nowMs), true
}

// levelsOf reads a bucket's level fields ("x"+name, "s"+name) at nowMs:
// those stored, then those of limits it does not store (full). A level
// that cannot be read is read as a full bucket of the limit given, or
// left out without one.
func levelsOf(fields map[string]string, limits map[string]tokenbucket.Limit, nowMs int64) Levels {
	byName := map[string]LimitLevel{}
	for name, l := range limits {
		byName[name] = LimitLevel{Name: name, Limit: l, Tokens: l.Capacity}
	}
	for f, x := range fields {
		if !strings.HasPrefix(f, "x") {
			continue
		}
		name := f[1:]
		l, st, ok := restated(x, fields["s"+name], limits[name], nowMs)
		if !ok {
			continue
		}
		byName[name] = LimitLevel{Name: name, Limit: l, Stored: true, Tokens: l.Tokens(st, nowMs), FullIn: l.TimeToFull(st, nowMs)}
	}
	out := Levels{At: time.UnixMilli(nowMs), Limits: make([]LimitLevel, 0, len(byName))}
	for _, l := range byName {
		out.Limits = append(out.Limits, l)
	}
	sort.Slice(out.Limits, func(i, j int) bool { return out.Limits[i].Name < out.Limits[j].Name })
	return out
}

// clock is the script's clock argument: Config.Now's, or "" for Redis's.
func (s *Store) clock() string {
	if s.cfg.Now != nil {
		return strconv.FormatInt(s.cfg.Now().UnixMilli(), 10)
	}
	return ""
}

// opTimeout bounds one of the operator's calls.
func (s *Store) opTimeout() time.Duration { return max(s.cfg.Timeout, time.Second) }

// inspect reads key's level fields, and Redis's clock.
func (s *Store) inspect(ctx context.Context, key cascade.Key) (int64, map[string]string, error) {
	c, err := s.conn()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	keys, err := s.chains.itemKeys(ctx, key)
	if err != nil {
		return 0, nil, err
	}
	msgs, err := inspectScript.Exec(ctx, c, []string{keys.bucket}, []string{s.clock(), "r"}).ToArray()
	if err != nil {
		return 0, nil, classify(err)
	}
	if len(msgs) == 0 || len(msgs)%2 != 1 {
		return 0, nil, fmt.Errorf("%w: %d values from the inspection", errReply, len(msgs))
	}
	now, err := msgs[0].AsInt64()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: clock: %w", errReply, err)
	}
	fields := make(map[string]string, len(msgs)/2)
	for i := 1; i < len(msgs); i += 2 {
		f, err1 := msgs[i].ToString()
		v, err2 := msgs[i+1].ToString()
		if err := errors.Join(err1, err2); err != nil {
			return 0, nil, fmt.Errorf("%w: field: %w", errReply, err)
		}
		fields[f] = v
	}
	return now, fields, nil
}

// write writes ws if every level is still as read; false when one
// changed.
func (s *Store) write(ctx context.Context, key cascade.Key, ws []levelWrite) (bool, error) {
	c, err := s.conn()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	keep := int64(0)
	for _, w := range ws {
		keep = max(keep, w.keepMs)
	}
	args := []string{s.clock(), "w", strconv.FormatInt(keep, 10)}
	for _, w := range ws {
		args = append(args, w.name, w.was, w.wasShape, w.x, w.shape)
	}
	keys, err := s.chains.itemKeys(ctx, key)
	if err != nil {
		return false, err
	}
	msgs, err := inspectScript.Exec(ctx, c, []string{keys.bucket}, args).ToArray()
	if err != nil {
		return false, classify(err)
	}
	if len(msgs) != 2 {
		return false, fmt.Errorf("%w: %d values from the write", errReply, len(msgs))
	}
	n, err := msgs[1].AsInt64()
	if err != nil {
		return false, fmt.Errorf("%w: write: %w", errReply, err)
	}
	return n == 1, nil
}

// Bucket reads key's bucket on both stores: the limits of a second from
// PerSecond, the others from Main.
func (sp *Split) Bucket(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (Levels, error) {
	a, err := sp.Main.Bucket(ctx, key, limits)
	if err != nil {
		return Levels{}, err
	}
	b, err := sp.PerSecond.Bucket(ctx, key, limits)
	if err != nil {
		return Levels{}, err
	}
	return merge(a, b), nil
}

// Reset resets key's bucket on both stores.
func (sp *Split) Reset(ctx context.Context, key cascade.Key, limits map[string]tokenbucket.Limit) (Levels, bool, error) {
	a, okA, err := sp.Main.Reset(ctx, key, limits)
	if err != nil {
		return Levels{}, false, err
	}
	b, okB, err := sp.PerSecond.Reset(ctx, key, limits)
	if err != nil {
		return Levels{}, false, err
	}
	return merge(a, b), okA || okB, nil
}

// TopUp tops up the limit named name on the store holding its level:
// PerSecond when it stores one there (or, storing none anywhere, when its
// limit is of a second), else Main.
func (sp *Split) TopUp(ctx context.Context, key cascade.Key, name string, amount tokenbucket.Millitokens, limits map[string]tokenbucket.Limit) (Levels, bool, error) {
	b, err := sp.PerSecond.Bucket(ctx, key, limits)
	if err != nil {
		return Levels{}, false, err
	}
	st := sp.Main
	for _, l := range b.Limits {
		if l.Name == name && (l.Stored || perSecond(l.Limit)) {
			st = sp.PerSecond
		}
	}
	return st.TopUp(ctx, key, name, amount, limits)
}

// merge is a bucket read from Main (a) and PerSecond (b): a limit of a
// second as b holds it, every other as a does, unless only b stores it.
func merge(a, b Levels) Levels {
	byName := map[string]LimitLevel{}
	for _, l := range a.Limits {
		byName[l.Name] = l
	}
	for _, l := range b.Limits {
		was, ok := byName[l.Name]
		if !ok || l.Stored && (perSecond(l.Limit) || !was.Stored) || !was.Stored && perSecond(l.Limit) {
			byName[l.Name] = l
		}
	}
	out := Levels{At: a.At, Limits: make([]LimitLevel, 0, len(byName))}
	for _, l := range byName {
		out.Limits = append(out.Limits, l)
	}
	sort.Slice(out.Limits, func(i, j int) bool { return out.Limits[i].Name < out.Limits[j].Name })
	return out
}
