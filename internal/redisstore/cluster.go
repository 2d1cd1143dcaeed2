package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// On a Redis cluster one call of the script may only touch keys of one
// slot, and each bucket item has its chain root's (its key's hash tag,
// chain.go): the levels of one hierarchy share a slot. A plan on items in
// several slots is decided in parts, one per slot, each all or
// nothing and at once; when the whole plan is refused, what the parts that
// were admitted consumed is given back (refunded, never above capacity).
// Between the parts' decisions and the give-back another plan may see
// those tokens taken, and a give-back to a bucket that refilled meanwhile
// is capped at its capacity: a refusal may cost a bucket a little, never
// admit more than it holds.

// clustered reports whether the store's client is a cluster client.
func (s *Store) clustered() bool {
	c := s.client.Load()
	return c != nil && (*c).Mode() == rueidis.ClientModeCluster
}

// part is the debits of a plan in one slot (or on one store of a Split),
// with their indexes in it, their keys' hash tags on a cluster (nil
// elsewhere) and the store that decides them.
type part struct {
	st     *Store
	idx    []int
	debits []cascade.Debit
	tags   []string
}

// slotParts splits debits (at indexes idx of their plan, 0, 1, ... when
// nil) by slot on a cluster, in order of first appearance: one part when
// they all share a slot, and always one on a single Redis.
func (s *Store) slotParts(ctx context.Context, debits []cascade.Debit, idx []int) ([]part, error) {
	if idx == nil {
		idx = make([]int, len(debits))
		for i := range idx {
			idx[i] = i
		}
	}
	tags, err := s.chains.tagsOf(ctx, debits)
	if err != nil || tags == nil {
		return []part{{st: s, idx: idx, debits: debits}}, err
	}
	var out []part
	at := map[uint16]int{}
	for i := range debits {
		slot := crc16(tags[i]) % 16384
		k, ok := at[slot]
		if !ok {
			k = len(out)
			at[slot] = k
			out = append(out, part{st: s})
		}
		out[k].idx = append(out[k].idx, idx[i])
		out[k].debits = append(out[k].debits, debits[i])
		out[k].tags = append(out[k].tags, tags[i])
	}
	return out, nil
}

// acquireParts decides a plan whose items lie in several slots (or
// stores), part by part, and gives back the admitted parts' consumes when
// the plan is refused. Within a part a quota debit does not refuse (the
// plan's quota rule spans the parts): the plan is admitted when every
// part is and the admission rule holds over all the statuses. A refused
// plan is told as cascade.Decide tells it on the levels the parts saw.
func acquireParts(ctx context.Context, debits []cascade.Debit, parts []part) (cascade.Decision, error) {
	decs := make([]cascade.Decision, len(parts))
	errs := make([]error, len(parts))
	jobs := make([]*job, len(parts))
	var wg sync.WaitGroup
	for k := range parts {
		ds := make([]cascade.Debit, len(parts[k].debits))
		for i, d := range parts[k].debits {
			if d.Role == cascade.Quota {
				d.Role = cascade.Advisory
			}
			ds[i] = d
		}
		jobs[k] = &job{kind: kindDecide, debits: ds, tags: parts[k].tags}
		wg.Go(func() { decs[k], errs[k] = parts[k].st.decide(ctx, jobs[k]) })
	}
	wg.Wait()
	dec := cascade.Decision{Statuses: make([]cascade.Status, len(debits))}
	all := true
	for k, p := range parts {
		if errs[k] != nil {
			continue
		}
		all = all && decs[k].Admitted
		for i, at := range p.idx {
			dec.Statuses[at] = decs[k].Statuses[i]
		}
	}
	err := errors.Join(errs...)
	dec.Admitted = err == nil && all && cascade.Admit(debits, dec.Statuses)
	if dec.Admitted {
		return dec, nil
	}
	for k, p := range parts {
		if errs[k] == nil && decs[k].Admitted {
			p.st.giveBack(p, decs[k].Statuses)
		}
	}
	if err != nil {
		return cascade.Decision{}, err
	}
	if told, ok := refusedAsOne(debits, parts, jobs); ok {
		return told, nil
	}
	for i := range dec.Statuses {
		if dec.Statuses[i].OK && debits[i].Op == cascade.Consume && debits[i].Role != cascade.Advisory {
			dec.Statuses[i].OK = false // given back with its plan
		}
	}
	return dec, nil
}

// refusedAsOne is the refusal of debits as cascade.Decide tells it on the
// levels its parts saw, at the first part's clock; false when those
// levels admit it (the parts decided at other instants).
func refusedAsOne(debits []cascade.Debit, parts []part, jobs []*job) (cascade.Decision, bool) {
	now := jobs[0].reply.nowMs
	type limitKey struct {
		key   cascade.Key
		limit string
	}
	slotOf := map[limitKey]int{}
	slot := make([]int, len(debits))
	var levels []tokenbucket.Level
	for k, p := range parts {
		r := &jobs[k].reply
		if len(r.fields) != len(p.debits) {
			return cascade.Decision{}, false
		}
		for i, at := range p.idx {
			d := &debits[at]
			lk := limitKey{d.Key, d.Limit}
			if j, ok := slotOf[lk]; ok {
				slot[at] = j
				continue
			}
			switch f := r.fields[i]; f {
			case "", "=":
				levels = append(levels, tokenbucket.New(d.Bucket.Full(now)))
			default:
				x, err := tokenbucket.ParseInt128(f)
				if err != nil {
					return cascade.Decision{}, false
				}
				levels = append(levels, tokenbucket.Stored(tokenbucket.State{X: x}))
			}
			slotOf[lk] = len(levels) - 1
			slot[at] = len(levels) - 1
		}
	}
	p := cascade.Plan{Debits: debits}
	dec := cascade.Decide(&p, slot, levels, now)
	return dec, !dec.Admitted
}

// giveBack refunds what an admitted part consumed (its consumes that its
// bucket admitted), within the store's budget; a give-back that fails is
// lost (the plan was refused: nothing is over-admitted).
func (s *Store) giveBack(p part, statuses []cascade.Status) {
	var back []cascade.Debit
	var tags []string
	for i, d := range p.debits {
		if d.Op == cascade.Consume && d.Amount > 0 && i < len(statuses) && statuses[i].OK {
			d.Op, d.Role = cascade.Refund, cascade.Advisory
			back = append(back, d)
			if p.tags != nil {
				tags = append(tags, p.tags[i])
			}
		}
	}
	if len(back) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.Timeout)
	defer cancel()
	_, _ = s.decide(ctx, &job{kind: kindDecide, debits: back, tags: tags})
}

// oneSlot reports whether keys all lie in one cluster slot.
func oneSlot(keys []string) bool {
	for i := 1; i < len(keys); i++ {
		if slotOf(keys[i]) != slotOf(keys[0]) {
			return false
		}
	}
	return true
}

// slotOf is a key's cluster slot: CRC16 of its hash tag mod 16384.
func slotOf(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC16-CCITT (XMODEM), as Redis Cluster hashes keys.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
