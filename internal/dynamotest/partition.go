package dynamotest

import (
	"hash/fnv"
	"math"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Partitioning is how a Fake with Options.Partitions lays a table's items
// out, as an on-demand DynamoDB table does: each partition key hashed to
// one of the table's partitions, each partition taking Options.Throughput
// (DynamoDB's 1,000 write and 3,000 read units a second), a new table as
// many partitions as its warm throughput needs (the larger of WarmWrites
// and WarmReads here and the WarmThroughput its CreateTable asked for), and
// partitions that split under sustained load and never merge.
type Partitioning struct {
	// WarmWrites and WarmReads are a new table's warm throughput, in units
	// a second: it starts with as many partitions as the larger of the two
	// needs at Options.Throughput (DynamoDB's on-demand tables: 4,000 and
	// 12,000, four partitions). A CreateTable with a larger WarmThroughput
	// (a table pre-warmed at creation) starts with as many as that needs.
	WarmWrites, WarmReads float64
	// SplitShare and SplitAfter: a partition asked for at least SplitShare
	// of its write or read units in each of SplitAfter consecutive seconds
	// splits (split for heat). Units asked count those throttled.
	SplitShare float64
	SplitAfter time.Duration
	// IsolateShare: when one partition key took at least this share of
	// the units asked of its partition in the last second, the split puts
	// it on a partition of its own (adaptive capacity isolating a hot
	// item); otherwise the partition splits at the middle of its hash
	// range. A partition of one partition key cannot split: its item
	// stays capped at one partition's throughput.
	IsolateShare float64
}

// OnDemand returns the Partitioning of a new on-demand table: warm
// throughput of 4,000 write and 12,000 read units a second, a partition
// split after 5 s at 80% of its capacity, an item isolated when it took half
// of its partition's units. The delays are the model's: DynamoDB documents
// that it splits and isolates, not how soon.
func OnDemand() Partitioning {
	return Partitioning{WarmWrites: 4000, WarmReads: 12000, SplitShare: 0.8, SplitAfter: 5 * time.Second, IsolateShare: 0.5}
}

// hashRange is one partition: the hashes lo..hi (inclusive) of the
// partition keys it holds, its buckets and what was asked of it.
type hashRange struct {
	lo, hi      uint64
	w, r        bucket
	sec         int64              // the second (unix) asked counts
	askW, askR  float64            // units asked this second (throttled too)
	byKey       map[string]float64 // units asked this second by partition key
	top         string             // the key asked most in the last closed second
	topShare    float64            // its share of that second's units
	hot         int                // consecutive closed seconds at SplitShare or more
	throttledTo time.Time          // every call throttled until then (ThrottlePartition)
}

// table's partitions, sorted by lo, covering the whole hash space.
type layout struct {
	parts  []*hashRange
	splits int
}

// hashKey is a partition key's place in the hash space: FNV-64a, mixed by
// MurmurHash3's finalizer so that keys that differ only in their last
// bytes (a shard suffix, "…#0" to "…#7") land far apart, as DynamoDB's
// hash spreads suffixed keys over its partitions. FNV-64a alone moves such
// keys by a small multiple of its prime: one partition for all of them.
func hashKey(pk string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(pk))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// newLayout lays out a new table of n partitions, each an equal hash range.
func newLayout(n int) *layout {
	n = max(n, 1)
	l := &layout{}
	step := ^uint64(0)/uint64(n) + 1
	for i := range n {
		lo := uint64(i) * step
		hi := lo + step - 1
		if i == n-1 {
			hi = ^uint64(0)
		}
		l.parts = append(l.parts, &hashRange{lo: lo, hi: hi})
	}
	return l
}

// find returns the partition of hash h.
func (l *layout) find(h uint64) *hashRange {
	i := sort.Search(len(l.parts), func(i int) bool { return l.parts[i].hi >= h })
	return l.parts[i]
}

// layoutOf returns table's partitions, laid out at its warm throughput on
// first use.
func (f *Fake) layoutOf(table string) *layout {
	if f.layouts == nil {
		f.layouts = map[string]*layout{}
	}
	l := f.layouts[table]
	if l == nil {
		writes, reads := f.warmThroughput(table)
		t := f.model.Throughput
		n := 1
		if t.WriteUnits > 0 {
			n = max(n, int(math.Ceil(writes/t.WriteUnits)))
		}
		if t.ReadUnits > 0 {
			n = max(n, int(math.Ceil(reads/t.ReadUnits)))
		}
		l = newLayout(n)
		f.layouts[table] = l
	}
	return l
}

// warmThroughput is table's warm throughput, in write and read units a
// second: the larger of Partitioning's (a new on-demand table's) and what
// CreateTable's WarmThroughput asked for (a table pre-warmed at creation).
// DynamoDB only raises a table's warm throughput, never lowers it.
func (f *Fake) warmThroughput(table string) (writes, reads float64) {
	p := f.model.Partitions
	writes, reads = p.WarmWrites, p.WarmReads
	if d := f.descs[table]; d != nil && d.WarmThroughput != nil {
		writes = max(writes, float64(aws.ToInt64(d.WarmThroughput.WriteUnitsPerSecond)))
		reads = max(reads, float64(aws.ToInt64(d.WarmThroughput.ReadUnitsPerSecond)))
	}
	return writes, reads
}

// roll closes the seconds of p up to now: a second at SplitShare or more of
// either capacity makes p hotter, any other cools it.
func (p *hashRange) roll(now time.Time, rateW, rateR, share float64) {
	sec := now.Unix()
	if sec == p.sec {
		return
	}
	busy := sec == p.sec+1 && (rateW > 0 && p.askW >= share*rateW || rateR > 0 && p.askR >= share*rateR)
	if busy {
		p.hot++
	} else {
		p.hot = 0
	}
	p.top, p.topShare = "", 0
	if total := p.askW + p.askR; total > 0 {
		for k, u := range p.byKey {
			if u/total > p.topShare {
				p.top, p.topShare = k, u/total
			}
		}
	}
	p.sec, p.askW, p.askR = sec, 0, 0
	p.byKey = nil
}

// takeHashed is take under Options.Partitions: units (table\x00pk →
// units) grouped by partition, all or none; a partition short of its units
// or throttled by ThrottlePartition fails every key on it.
func (f *Fake) takeHashed(k callKind, units map[string]float64) map[string]bool {
	now := time.Now()
	t, p := f.model.Throughput, f.model.Partitions
	type use struct {
		part  *hashRange
		units float64
		keys  []string
	}
	byPart := map[*hashRange]*use{}
	for key, u := range units {
		table, pk := splitPartition(key)
		hr := f.layoutOf(table).find(hashKey(pk))
		hr.roll(now, t.WriteUnits, t.ReadUnits, p.SplitShare)
		if hr.byKey == nil {
			hr.byKey = map[string]float64{}
		}
		hr.byKey[key] += u
		if k == writeCall {
			hr.askW += u
		} else {
			hr.askR += u
		}
		us := byPart[hr]
		if us == nil {
			us = &use{part: hr}
			byPart[hr] = us
		}
		us.units += u
		us.keys = append(us.keys, key)
	}
	var short map[string]bool
	for _, us := range byPart {
		b, rate := f.rangeBucket(us.part, k, now)
		if rate > 0 && b.tokens < us.units || now.Before(us.part.throttledTo) {
			if short == nil {
				short = map[string]bool{}
			}
			for _, key := range us.keys {
				short[key] = true
			}
		}
	}
	if short == nil {
		for _, us := range byPart {
			b, _ := f.rangeBucket(us.part, k, now)
			b.tokens -= us.units
		}
	}
	for key := range units {
		f.maybeSplit(key)
	}
	return short
}

// rangeBucket returns p's bucket of kind k filled up to now, and its rate
// (zero: no limit of that kind).
func (f *Fake) rangeBucket(p *hashRange, k callKind, now time.Time) (*bucket, float64) {
	b, rate := &p.r, f.model.Throughput.ReadUnits
	if k == writeCall {
		b, rate = &p.w, f.model.Throughput.WriteUnits
	}
	if b.at.IsZero() {
		b.tokens, b.at = rate, now
	}
	if now.After(b.at) {
		b.tokens = min(rate, b.tokens+rate*now.Sub(b.at).Seconds())
		b.at = now
	}
	return b, rate
}

// maybeSplit splits the partition of key (table\x00pk) when it has been hot
// for SplitAfter: around its top key when that key took IsolateShare of it,
// else at the middle of its range. A range of one hash never splits.
func (f *Fake) maybeSplit(key string) {
	p := f.model.Partitions
	table, pk := splitPartition(key)
	l := f.layoutOf(table)
	hr := l.find(hashKey(pk))
	if hr.lo == hr.hi || p.SplitAfter <= 0 || time.Duration(hr.hot)*time.Second < p.SplitAfter {
		return
	}
	var cuts []*hashRange
	if hr.top != "" && hr.topShare >= p.IsolateShare {
		_, topPK := splitPartition(hr.top)
		h := hashKey(topPK)
		if h > hr.lo {
			cuts = append(cuts, &hashRange{lo: hr.lo, hi: h - 1})
		}
		cuts = append(cuts, &hashRange{lo: h, hi: h})
		if h < hr.hi {
			cuts = append(cuts, &hashRange{lo: h + 1, hi: hr.hi})
		}
	} else {
		mid := hr.lo + (hr.hi-hr.lo)/2
		cuts = []*hashRange{{lo: hr.lo, hi: mid}, {lo: mid + 1, hi: hr.hi}}
	}
	i := sort.Search(len(l.parts), func(i int) bool { return l.parts[i].lo >= hr.lo })
	for _, c := range cuts {
		c.throttledTo = hr.throttledTo
	}
	l.parts = append(l.parts[:i], append(cuts, l.parts[i+1:]...)...)
	l.splits++
}

// splitPartition splits a partition name (table\x00pk) into its table and
// its partition key.
func splitPartition(key string) (table, pk string) {
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// PartitionStat is one partition of a table under Options.Partitions.
type PartitionStat struct {
	// Lo and Hi bound the hashes of the partition keys it holds.
	Lo, Hi uint64
	// Isolated says it holds one hash: an item that adaptive capacity
	// isolated.
	Isolated bool
}

// Partitions returns table's partitions under Options.Partitions (nil
// without it, or before the table's first data call), and how many splits
// made them.
func (f *Fake) Partitions(table string) (parts []PartitionStat, splits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.layouts[table]
	if l == nil {
		return nil, 0
	}
	for _, p := range l.parts {
		parts = append(parts, PartitionStat{Lo: p.lo, Hi: p.hi, Isolated: p.lo == p.hi})
	}
	return parts, l.splits
}

// ThrottlePartition makes the partition that holds partition key pk of
// table throttle every read and write for d from now, under
// Options.Partitions (without it, nothing), as DynamoDB throttling a
// partition for reasons of its own. Partitions it splits into inherit it.
func (f *Fake) ThrottlePartition(table, pk string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.model.Partitions == nil {
		return
	}
	f.layoutOf(table).find(hashKey(pk)).throttledTo = time.Now().Add(d)
}
