package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Audit trails: a list per entity (every scope of it), per resource and
// for the system, newest first, capped at maxAudit records. The operator's
// writes add a record naming who made them.

// maxAudit bounds the records an audit trail keeps: past it the oldest
// are dropped.
const maxAudit = 10_000

// AuditRecord is one change an operator made.
type AuditRecord struct {
	ID     string    // sorts by time
	At     time.Time // when it was recorded
	Action string    // "limits.set", "entity.put", "bucket.reset", …
	// Scope names what changed ("entity \"E\" resource \"R\"").
	Scope     string
	Before    string
	After     string
	Principal string // who made it; empty when not known
}

// Record adds r to the audit trail of sc (its entity's, else its
// resource's or the system's), stamping its ID and time.
func (s *Store) Record(ctx context.Context, sc Scope, r AuditRecord) error {
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	r.At = s.now()
	r.ID = fmt.Sprintf("%013d-%s", r.At.UnixMilli(), hex.EncodeToString(rb[:]))
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("redisstore: audit record: %w", err)
	}
	c, err := s.conn()
	if err != nil {
		return err
	}
	key := s.keys.audit(s.nsOr(sc.Namespace), sc)
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	for _, res := range c.DoMulti(cctx, c.B().Lpush().Key(key).Element(string(b)).Build(), c.B().Ltrim().Key(key).Start(0).Stop(maxAudit-1).Build()) {
		if err := res.Error(); err != nil {
			return classify(err)
		}
	}
	return nil
}

// Audit returns the audit trail of sc, oldest first: at an entity scope,
// the records of every resource of the entity.
func (s *Store) Audit(ctx context.Context, sc Scope) ([]AuditRecord, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	raw, err := c.Do(cctx, c.B().Lrange().Key(s.keys.audit(s.nsOr(sc.Namespace), sc)).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return nil, classify(err)
	}
	out := make([]AuditRecord, 0, len(raw))
	for i, v := range slices.Backward(raw) {
		var r AuditRecord
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, fmt.Errorf("redisstore: audit record %s: %w", strconv.Itoa(i), err)
		}
		out = append(out, r)
	}
	return out, nil
}
