package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// The token's bounds. Sign refuses a lease outside them and Verify a token
// outside them, before it allocates for what the token claims.
const (
	// MaxTokenBytes bounds a token, in characters: 4 KiB.
	MaxTokenBytes = 4096
	// MaxBuckets bounds the buckets of a lease.
	MaxBuckets = 64
	// MaxLimits bounds the limits of one bucket.
	MaxLimits = 64
	// MaxShard bounds a bucket's shard.
	MaxShard = 1<<16 - 1
	// maxStrings bounds the string table.
	maxStrings = 256
)

// The token formats this package writes and reads. A lease with no money
// limit is written in version 1, byte for byte as before money limits
// existed, so that replicas not yet upgraded settle it; one with a money
// limit in version 2, which flags each limit's money and carries its price.
// Both are read.
const (
	version1 = 1
	version2 = 2
)

// versionOf returns the format l is written in.
func versionOf(l *Lease) byte {
	for i := range l.Buckets {
		for j := range l.Buckets[i].Limits {
			if l.Buckets[i].Limits[j].Money {
				return version2
			}
		}
	}
	return version1
}

// Sizes of the fixed parts: version byte and key id before the body, the
// truncated HMAC-SHA256 after it.
const (
	keyIDBytes = 4
	headBytes  = 1 + keyIDBytes
	macBytes   = 16
)

// ErrTooLarge is returned by Sign for a lease outside the token's bounds
// (MaxTokenBytes, MaxBuckets, MaxLimits, MaxShard): an admission that
// leases that much cannot be settled by a token.
var ErrTooLarge = errors.New("lease: too large for a token")

// maxEncoded is the longest binary token: MaxTokenBytes characters of
// base64 without padding.
const maxEncoded = MaxTokenBytes * 6 / 8

// encoder writes a lease's body: the string table, then the references
// into it.
type encoder struct {
	strs []string
}

// ref returns s's index in the table, adding it at the end on first use.
func (e *encoder) ref(s string) uint64 {
	for i, t := range e.strs {
		if t == s {
			return uint64(i)
		}
	}
	e.strs = append(e.strs, s)
	return uint64(len(e.strs) - 1)
}

// appendBody appends l's encoding after the version byte (versionOf) and
// key id: the id, the expiry, the string table, the domain and the
// buckets. The lease must have passed check.
func appendBody(b []byte, l *Lease) []byte {
	v := versionOf(l)
	var e encoder
	e.strs = make([]string, 0, 8)
	e.ref(l.Domain)
	for i := range l.Buckets {
		bk := &l.Buckets[i]
		e.ref(bk.Key.Namespace)
		e.ref(bk.Key.Entity)
		e.ref(bk.Key.Resource)
		for j := range bk.Limits {
			e.ref(bk.Limits[j].Name)
			if a := bk.Limits[j].Adjustment; a != "" {
				e.ref(a)
			}
			if c := bk.Limits[j].Bucket.Calendar; !c.IsZero() {
				e.ref(c.String())
			}
		}
	}
	b = appendString(b, l.ID)
	b = binary.AppendUvarint(b, uint64(l.Expires.UnixMilli()))
	b = binary.AppendUvarint(b, uint64(len(e.strs)))
	for _, s := range e.strs {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, e.ref(l.Domain))
	b = binary.AppendUvarint(b, uint64(len(l.Buckets)))
	for i := range l.Buckets {
		bk := &l.Buckets[i]
		b = binary.AppendUvarint(b, e.ref(bk.Key.Namespace))
		b = binary.AppendUvarint(b, e.ref(bk.Key.Entity))
		b = binary.AppendUvarint(b, e.ref(bk.Key.Resource))
		b = binary.AppendUvarint(b, uint64(bk.Shard))
		b = binary.AppendUvarint(b, uint64(len(bk.Limits)))
		for j := range bk.Limits {
			b = appendLimit(b, &e, &bk.Limits[j], v)
		}
	}
	return b
}

// appendLimit appends one limit in format v; its strings are in e's table.
func appendLimit(b []byte, e *encoder, lm *Limit, v byte) []byte {
	// The name's reference, with its flags in the low bits: an adjustment's
	// name follows (bit 0); in version 2, the limit is in money and its
	// price follows the estimate (bit 1).
	name := e.ref(lm.Name) << 1
	if v == version2 {
		name <<= 1
		if lm.Money {
			name |= 2
		}
	}
	if lm.Adjustment == "" {
		b = binary.AppendUvarint(b, name)
	} else {
		b = binary.AppendUvarint(b, name|1)
		b = binary.AppendUvarint(b, e.ref(lm.Adjustment))
	}
	b = appendScaled(b, uint64(lm.Bucket.Capacity))
	b = appendScaled(b, uint64(lm.Bucket.RefillAmount))
	if c := lm.Bucket.Calendar; !c.IsZero() {
		// A calendar budget: a period of 0, then its calendar.
		b = appendScaled(b, 0)
		b = binary.AppendUvarint(b, e.ref(c.String()))
	} else {
		b = appendScaled(b, uint64(lm.Bucket.RefillPeriod/time.Millisecond))
	}
	b = appendScaled(b, uint64(lm.Estimate))
	if lm.Money {
		b = appendScaled(b, uint64(lm.Price.Input))
		b = appendScaled(b, uint64(lm.Price.Output))
		b = appendScaled(b, uint64(lm.Price.Request))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendScaled appends v as a uvarint of v/1000·2 when v is a multiple of
// 1000 and of v·2+1 otherwise: whole tokens (1000 millitokens) and whole
// seconds (1000 ms) take a byte or two less. v must be below 2^63.
func appendScaled(b []byte, v uint64) []byte {
	if v%1000 == 0 {
		return binary.AppendUvarint(b, v/1000<<1)
	}
	return binary.AppendUvarint(b, v<<1|1)
}

// check reports why l cannot be signed: a field Verify would refuse, or a
// bound of the token.
func check(l *Lease) error {
	switch {
	case len(l.ID) == 0 || len(l.ID) > cascade.MaxSettlementID:
		return fmt.Errorf("lease: id of %d bytes (1 to %d)", len(l.ID), cascade.MaxSettlementID)
	case l.Expires.UnixMilli() <= 0:
		return fmt.Errorf("lease: expiry %s is not after 1970", l.Expires)
	case len(l.Buckets) > MaxBuckets:
		return fmt.Errorf("%w: %d buckets (at most %d)", ErrTooLarge, len(l.Buckets), MaxBuckets)
	}
	for i := range l.Buckets {
		bk := &l.Buckets[i]
		switch {
		case bk.Shard < 0:
			return fmt.Errorf("lease: bucket %d has a negative shard", i)
		case bk.Shard > MaxShard:
			return fmt.Errorf("%w: bucket %d has shard %d (at most %d)", ErrTooLarge, i, bk.Shard, MaxShard)
		case len(bk.Limits) > MaxLimits:
			return fmt.Errorf("%w: bucket %d has %d limits (at most %d)", ErrTooLarge, i, len(bk.Limits), MaxLimits)
		}
		for j := range bk.Limits {
			lm := &bk.Limits[j]
			if err := lm.Bucket.Validate(); err != nil {
				return fmt.Errorf("lease: bucket %d limit %q: %w", i, lm.Name, err)
			}
			if lm.Estimate < 0 || lm.Estimate > tokenbucket.MaxMillitokens {
				return fmt.Errorf("lease: bucket %d limit %q: estimate %d outside [0, MaxMillitokens]", i, lm.Name, lm.Estimate)
			}
			if err := checkPrice(lm); err != nil {
				return fmt.Errorf("lease: bucket %d limit %q: %w", i, lm.Name, err)
			}
		}
	}
	return nil
}

// checkPrice reports why lm's price cannot be signed: a price of a limit
// not in money, or one outside [0, descriptors.MaxMicros].
func checkPrice(lm *Limit) error {
	p := lm.Price
	switch {
	case !lm.Money && p != (descriptors.Price{}):
		return errors.New("a price on a limit not in money")
	case p.Input < 0 || p.Output < 0 || p.Request < 0 ||
		p.Input > descriptors.MaxMicros || p.Output > descriptors.MaxMicros || p.Request > descriptors.MaxMicros:
		return fmt.Errorf("price %+v outside [0, %d] micro-dollars", p, int64(descriptors.MaxMicros))
	}
	return nil
}

// decoder reads a body. Every read checks what is left, so that no count
// or length a token claims is trusted before the bytes are there.
type decoder struct {
	v    byte // the format, version1 or version2
	b    []byte
	s    string   // b as a string: table strings are slices of it (one allocation)
	strs []string // the string table
	off  int
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

// uvarint reads a uvarint no larger than max.
func (d *decoder) uvarint(what string, max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("%s at byte %d does not decode", what, d.off)
		return 0
	}
	d.off += n
	if v > max {
		d.fail("%s %d is above %d", what, v, max)
		return 0
	}
	return v
}

// str reads a length and that many bytes.
func (d *decoder) str(what string) string {
	n, k := binary.Uvarint(d.b[d.off:])
	if d.err == nil && k <= 0 {
		d.fail("%s length at byte %d does not decode", what, d.off)
	}
	if d.err != nil {
		return ""
	}
	d.off += k
	if n > uint64(len(d.b)-d.off) {
		d.fail("%s of %d bytes overruns the token", what, n)
	}
	if d.err != nil {
		return ""
	}
	s := d.s[d.off : d.off+int(n)]
	d.off += int(n)
	return s
}

// scaled reads what appendScaled wrote, no larger than max, in its
// canonical form only.
func (d *decoder) scaled(what string, max uint64) uint64 {
	x := d.uvarint(what, math.MaxUint64)
	if d.err != nil {
		return 0
	}
	v := x >> 1
	if x&1 == 1 {
		if v%1000 == 0 {
			d.fail("%s %d is not in canonical form", what, v)
			return 0
		}
	} else if v > max/1000 {
		d.fail("%s %d000 is above %d", what, v, max)
		return 0
	} else {
		v *= 1000
	}
	if v > max {
		d.fail("%s %d is above %d", what, v, max)
		return 0
	}
	return v
}

// decodeBody reads the body b of format v (after the version byte and key
// id, before the signature) into a lease, or fails with an error wrapping
// ErrMalformed. A version 2 body must have a money limit (else it would
// have been written in version 1).
func decodeBody(v byte, b []byte) (*Lease, error) {
	d := &decoder{v: v, b: b, s: string(b)}
	l := &Lease{}
	l.ID = d.str("id")
	if d.err == nil && (len(l.ID) == 0 || len(l.ID) > cascade.MaxSettlementID) {
		d.fail("id of %d bytes (1 to %d)", len(l.ID), cascade.MaxSettlementID)
	}
	exp := d.uvarint("expiry", math.MaxInt64)
	if d.err == nil && exp == 0 {
		d.fail("expiry at the epoch")
	}
	l.Expires = time.UnixMilli(int64(exp))
	d.table()
	l.Domain = d.ref("domain")
	n := d.uvarint("bucket count", d.fits(MaxBuckets, minBucketBytes))
	if d.err == nil && n > 0 {
		l.Buckets = make([]Bucket, n)
	}
	for i := range l.Buckets {
		d.bucket(&l.Buckets[i])
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d bytes left over", len(d.b)-d.off)
	}
	if d.err == nil && v == version2 && versionOf(l) != version2 {
		d.fail("a version 2 lease without a money limit")
	}
	if d.err != nil {
		return nil, d.err
	}
	return l, nil
}

// The fewest bytes a bucket (three references, a shard, a limit count)
// and a limit (a reference, four numbers) take.
const (
	minBucketBytes = 5
	minLimitBytes  = 5
)

// fits bounds a count by max and by how many items of size bytes the rest
// of the body could hold.
func (d *decoder) fits(max, size int) uint64 {
	return uint64(min(max, (len(d.b)-d.off)/size))
}

// table reads the string table.
func (d *decoder) table() {
	n := d.uvarint("string count", d.fits(maxStrings, 1))
	if d.err != nil {
		return
	}
	d.strs = make([]string, n)
	for i := range d.strs {
		d.strs[i] = d.str("string")
	}
}

// ref reads an index into the string table and returns its string.
func (d *decoder) ref(what string) string {
	if d.err == nil && len(d.strs) == 0 {
		d.fail("%s refers to an empty table", what)
	}
	i := d.uvarint(what, uint64(max(len(d.strs), 1)-1))
	if d.err != nil {
		return ""
	}
	return d.strs[i]
}

// limitNames reads a limit's name and flags: when bit 0 says one follows,
// its adjustment's name; in version 2, bit 1 says it is in money.
func (d *decoder) limitNames() (name, adjustment string, money bool) {
	if d.err == nil && len(d.strs) == 0 {
		d.fail("limit name refers to an empty table")
	}
	shift := uint(1)
	if d.v == version2 {
		shift = 2
	}
	v := d.uvarint("limit name", uint64(max(len(d.strs), 1))<<shift-1)
	if d.err != nil {
		return "", "", false
	}
	name, money = d.strs[v>>shift], shift == 2 && v&2 != 0
	if v&1 == 1 {
		adjustment = d.ref("adjustment name")
	}
	return name, adjustment, money
}

// price reads a money limit's price, three amounts of micro-dollars.
func (d *decoder) price(p *descriptors.Price) {
	p.Input = int64(d.scaled("input price", descriptors.MaxMicros))
	p.Output = int64(d.scaled("output price", descriptors.MaxMicros))
	p.Request = int64(d.scaled("request price", descriptors.MaxMicros))
}

// calendar reads the calendar of a budget, whose period is one unit of its
// clock.
func (d *decoder) calendar(b *tokenbucket.Limit) {
	s := d.ref("calendar")
	if d.err != nil {
		return
	}
	c, err := tokenbucket.ParseCalendar(s)
	if err != nil {
		d.fail("%v", err)
		return
	}
	b.Calendar, b.RefillPeriod = c, time.Millisecond
}

// bucket reads one bucket and its limits.
func (d *decoder) bucket(bk *Bucket) {
	bk.Key.Namespace = d.ref("namespace")
	bk.Key.Entity = d.ref("entity")
	bk.Key.Resource = d.ref("resource")
	bk.Shard = int(d.uvarint("shard", MaxShard))
	n := d.uvarint("limit count", d.fits(MaxLimits, minLimitBytes))
	if d.err != nil || n == 0 {
		return
	}
	bk.Limits = make([]Limit, n)
	for j := range bk.Limits {
		lm := &bk.Limits[j]
		if lm.Name, lm.Adjustment, lm.Money = d.limitNames(); d.err != nil {
			return
		}
		lm.Bucket.Capacity = tokenbucket.Millitokens(d.scaled("capacity", uint64(tokenbucket.MaxMillitokens)))
		lm.Bucket.RefillAmount = tokenbucket.Millitokens(d.scaled("refill amount", uint64(tokenbucket.MaxMillitokens)))
		ms := d.scaled("refill period", uint64(tokenbucket.MaxPeriod/time.Millisecond))
		lm.Bucket.RefillPeriod = time.Duration(ms) * time.Millisecond
		if ms == 0 && d.err == nil {
			d.calendar(&lm.Bucket)
		}
		lm.Estimate = tokenbucket.Millitokens(d.scaled("estimate", uint64(tokenbucket.MaxMillitokens)))
		if lm.Money {
			d.price(&lm.Price)
		}
		if d.err != nil {
			return
		}
		if err := lm.Bucket.Validate(); err != nil {
			d.fail("limit %q: %v", lm.Name, err)
			return
		}
	}
}
