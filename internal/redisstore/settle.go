package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

const (
	// settledMargin is how long past its Expires a settlement's ID is
	// kept: replicas' clocks differ from Redis's by less.
	settledMargin = time.Minute
	// repaidKeep is how long a bucket hash keeps a replica's repayment
	// stamp at least (cascade.Repayment: an hour after it, and more).
	repaidKeep = 2 * time.Hour
)

// Settle applies st once per ID: in the same call of the script as its
// charges and refunds, a key recording the ID in the deployment's
// namespace (kept until st.Expires and a minute) is written, and a later
// Settle of the ID finds it and is a duplicate.
func (s *Store) Settle(ctx context.Context, st *cascade.Settlement) (cascade.Settled, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Settled{}, fmt.Errorf("redisstore: settle: %w", err)
	}
	if st == nil {
		return cascade.Settled{}, fmt.Errorf("redisstore: settle: nil settlement: %w", cascade.ErrSettlement)
	}
	if err := st.Validate(); err != nil {
		return cascade.Settled{}, fmt.Errorf("redisstore: settle: %w", err)
	}
	debits := make([]cascade.Debit, len(st.Debits))
	for i, d := range st.Debits {
		if err := d.Bucket.Validate(); err != nil {
			return cascade.Settled{}, fmt.Errorf("redisstore: settle %q: debit %d of %s: %w: %w", st.ID, i, d.Limit, cascade.ErrSettlement, err)
		}
		d.Role = cascade.Advisory // a settlement is never refused
		debits[i] = d
	}
	keep := time.Until(st.Expires) + settledMargin
	if s.cfg.Now != nil {
		keep = st.Expires.Sub(s.cfg.Now()) + settledMargin
	}
	if s.clustered() {
		return s.settleParts(ctx, st.ID, debits, max(keep.Milliseconds(), 1))
	}
	j := &job{kind: kindSettle, debits: debits, once: s.keys.settled(s.cfg.Namespace, s.keys.tag(cascade.Key{Entity: st.ID}), st.ID), keepMs: max(keep.Milliseconds(), 1)}
	return s.applyOnce(ctx, j)
}

// settleParts settles on a cluster, where a settlement's items may lie in
// several slots: the ID's own key (in the ID's slot) says whether it was
// settled; if not, each slot's part is applied once, by a key of the ID in
// that slot (so a part applied by an earlier attempt whose answer was lost
// is not applied again), and then the ID's key is written. An ID whose
// parts were applied but whose key was not (the call failed between) is
// settled again as a duplicate of each part.
func (s *Store) settleParts(ctx context.Context, id string, debits []cascade.Debit, keepMs int64) (cascade.Settled, error) {
	c, err := s.conn()
	if err != nil {
		return cascade.Settled{}, err
	}
	idKey := s.keys.settled(s.cfg.Namespace, s.keys.tag(cascade.Key{Entity: id}), id)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	n, err := c.Do(cctx, c.B().Exists().Key(idKey).Build()).AsInt64()
	cancel()
	if err != nil {
		return cascade.Settled{}, classify(err)
	}
	if n > 0 {
		return cascade.Settled{Duplicate: true}, nil
	}
	out := cascade.Settled{Statuses: make([]cascade.Status, len(debits))}
	parts, err := s.slotParts(ctx, debits, nil)
	if err != nil {
		return cascade.Settled{}, err
	}
	for _, p := range parts {
		tag := s.keys.tag(p.debits[0].Key)
		if p.tags != nil {
			tag = p.tags[0]
		}
		j := &job{kind: kindSettle, debits: p.debits, tags: p.tags, once: s.keys.settled(s.cfg.Namespace, tag, id), keepMs: keepMs}
		res, err := s.applyOnce(ctx, j)
		if err != nil {
			return cascade.Settled{}, err
		}
		for i, at := range p.idx {
			if i < len(res.Statuses) {
				out.Statuses[at] = res.Statuses[i]
			}
		}
	}
	cctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := c.Do(cctx, c.B().Set().Key(idKey).Value("1").PxMilliseconds(keepMs).Build()).Error(); err != nil {
		return cascade.Settled{}, classify(err)
	}
	return out, nil
}

// Repay applies r once per replica stamp, in the same call of the script
// as the item's decisions: the hash keeps the replica's highest stamp
// applied, and a repayment whose stamp is not higher is a duplicate.
func (s *Store) Repay(ctx context.Context, r *cascade.Repayment) (cascade.Settled, error) {
	if err := ctx.Err(); err != nil {
		return cascade.Settled{}, fmt.Errorf("redisstore: repay: %w", err)
	}
	if err := r.Validate(); err != nil {
		return cascade.Settled{}, fmt.Errorf("redisstore: repay: %w", err)
	}
	debits := make([]cascade.Debit, len(r.Debits))
	for i, d := range r.Debits {
		if err := d.Bucket.Validate(); err != nil {
			return cascade.Settled{}, fmt.Errorf("redisstore: repay: debit %d of %s: %w: %w", i, d.Limit, cascade.ErrRepayment, err)
		}
		d.Role = cascade.Advisory // a repayment is never refused
		debits[i] = d
	}
	j := &job{kind: kindRepay, debits: debits, item: r.Key, stampField: "p" + r.Replica, stamp: r.Stamp, keepMs: repaidKeep.Milliseconds()}
	if s.clustered() {
		var err error
		if j.tags, err = s.chains.tagsOf(ctx, debits); err != nil {
			return cascade.Settled{}, err
		}
		if j.itemTag, err = s.chains.tagOf(ctx, r.Key); err != nil {
			return cascade.Settled{}, err
		}
	}
	return s.applyOnce(ctx, j)
}

// applyOnce decides a settlement or a repayment job.
func (s *Store) applyOnce(ctx context.Context, j *job) (cascade.Settled, error) {
	dec, err := s.decide(ctx, j)
	if errors.Is(err, errDuplicate) {
		return cascade.Settled{Duplicate: true}, nil
	}
	if err != nil {
		return cascade.Settled{}, err
	}
	return cascade.Settled{Statuses: dec.Statuses}, nil
}
