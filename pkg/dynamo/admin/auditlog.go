package admin

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Audit attributes.
const (
	AttrAction    = "action"
	AttrScope     = "scope"
	AttrAt        = "at"
	AttrBefore    = "before"
	AttrAfter     = "after"
	AttrPrincipal = "principal"
)

// writeAudit writes one audit record under the entity it concerns (see
// auditEntity).
func (s *Store) writeAudit(ctx context.Context, ns string, sc Scope, action, before, after string) error {
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	p := s.auditPut(ns, sc, action, before, after)
	if _, err := s.t.API.PutItem(cctx, &dynamodb.PutItemInput{TableName: p.TableName, Item: p.Item}); err != nil {
		return dynamo.Classify("put audit", err)
	}
	return nil
}

// auditPut is the write of one audit record, for writeAudit or a
// transaction.
func (s *Store) auditPut(ns string, sc Scope, action, before, after string) *types.Put {
	now := s.t.Now()
	it := item.Key(item.AuditPK(ns, auditEntity(sc)), item.AuditSK(newULID(now)))
	it[AttrAction] = item.StrAV(action)
	it[AttrScope] = item.StrAV(sc.String())
	it[AttrAt] = item.NumAV(now.UnixMilli())
	it[AttrBefore] = item.StrAV(before)
	it[AttrAfter] = item.StrAV(after)
	it[item.AttrNamespace] = item.StrAV(ns)
	if s.t.Principal != "" {
		it[AttrPrincipal] = item.StrAV(s.t.Principal)
	}
	return &types.Put{TableName: aws.String(s.t.Name), Item: it}
}

// auditEntity is the entity whose audit trail records a change to sc: its
// entity, or for a scope without one "\x00system" or "\x00resource/" + its
// resource.
func auditEntity(sc Scope) string {
	switch {
	case sc.Entity != "":
		return sc.Entity
	case sc.System:
		return "\x00system"
	default:
		return "\x00resource/" + sc.Resource
	}
}

// newULID returns a ULID: 48 bits of unix ms and 80 random bits in
// Crockford base32, so ids sort by time.
func newULID(t time.Time) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(t.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	// 128 bits → 26 base32 characters.
	var out [26]byte
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 | uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
