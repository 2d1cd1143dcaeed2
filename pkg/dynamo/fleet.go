package dynamo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// skFleet is the sort key of a namespace's fleet record, under its system
// partition: one attribute per live replica, "r_" + its id, holding the
// time (unix ms) until which it counts as alive.
const (
	skFleet         = "#FLEET"
	fleetAttrPrefix = "r_"
	// MaxReplicaID bounds a replica id (Heartbeat), in bytes.
	MaxReplicaID = 64
	// fleetForget is how long after its time passed a replica's entry is
	// removed from the fleet record.
	fleetForget = time.Minute
)

// Heartbeat records that the replica named id (1 to MaxReplicaID of
// [A-Za-z0-9._-]) is alive until now + ttl in the fleet record of the
// store's namespace, removes stale (the replicas an earlier Heartbeat
// returned as expired), and returns how many replicas are alive now, this
// one included, and the ids whose time passed over a minute ago. One
// UpdateItem of one small item (1 WCU for a fleet of up to about 30
// replicas): a fleet of N replicas beating every 5 s writes N/5 a second.
// ON_UNAVAILABLE=local bounds a replica's share of every limit by this
// count while DynamoDB does not answer.
func (s *Store) Heartbeat(ctx context.Context, id string, ttl time.Duration, stale []string) (live int, expired []string, err error) {
	if id == "" || len(id) > MaxReplicaID || item.Esc(id) != id {
		return 0, nil, fmt.Errorf("dynamo: heartbeat: replica id %q: 1 to %d of [A-Za-z0-9._-]: %w", id, MaxReplicaID, cascade.ErrInvalid)
	}
	now := s.now()
	names := map[string]string{"#me": fleetAttrPrefix + id, "#ttl": item.AttrTTL}
	expr := "SET #me = :until, #ttl = :ttl"
	var remove []string
	for i, r := range stale {
		if r == id || item.Esc(r) != r || len(r) > MaxReplicaID {
			continue
		}
		n := "#g" + strconv.Itoa(i)
		names[n] = fleetAttrPrefix + r
		remove = append(remove, n)
	}
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	out, err := s.api.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.cfg.Table),
		Key:                      item.Key(item.SystemPK(s.cfg.Namespace), skFleet),
		UpdateExpression:         aws.String(expr),
		ExpressionAttributeNames: names,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":until": item.NumAV(now.Add(ttl).UnixMilli()),
			// The record lives a day past the last beat of any replica.
			":ttl": item.NumAV(now.Add(ttl + 24*time.Hour).Unix()),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return 0, nil, Classify("heartbeat "+s.cfg.Table, err)
	}
	nowMs := now.UnixMilli()
	below := 0 // live replicas whose ids sort before this one's
	for name, av := range out.Attributes {
		rest, ok := strings.CutPrefix(name, fleetAttrPrefix)
		if !ok {
			continue
		}
		n, ok := av.(*types.AttributeValueMemberN)
		if !ok {
			continue
		}
		until, err := strconv.ParseInt(n.Value, 10, 64)
		switch {
		case err == nil && until > nowMs:
			live++
			if rest < id {
				below++
			}
		case err != nil || until < nowMs-fleetForget.Milliseconds():
			// Gone for long enough that a late beat of its own cannot be
			// racing the removal.
			expired = append(expired, rest)
		}
	}
	s.place.Store(&place{rank: below, live: max(live, 1), until: now.Add(ttl).UnixMilli()})
	return max(live, 1), expired, nil
}

// place is this replica's rank among the live replicas of the fleet
// record, by id, as its last heartbeat found them, and until when that
// stands (its own time in the record). A hot bucket's home shards follow
// it (pace.go).
type place struct {
	rank, live int
	until      int64
}

// LastSeen returns what this replica last saw of debit d's bucket: the
// tokens it held (refilled to now) in the last image of the item's first
// shard that a write or read returned, if the image cache still holds one,
// and whether the item refused a decision within the last second. It makes
// no call: ON_UNAVAILABLE=local starts an item's local bucket from it.
func (s *Store) LastSeen(d *cascade.Debit) (tokens tokenbucket.Millitokens, seen, refused bool) {
	k := d.Key
	ns := s.ns(k)
	b := bucket{key: k, ns: ns, base: item.NSPart(ns) + "/" + item.Esc(k.Entity) + "#" + item.Esc(k.Resource)}
	now := s.nowMs()
	s.mu.Lock()
	img, ok := s.images.peek(b.pk(0))
	if !ok {
		img, _ = s.forgot.peek(b.pk(0))
	}
	r, rok := s.rejects.peek(b.base)
	s.mu.Unlock()
	refused = rok && now < r.untilMs+gateWindow.Milliseconds()
	l, ok := img.Has(item.LimitPrefix(d.Limit))
	if !ok {
		return 0, false, refused
	}
	return d.Bucket.Tokens(stateOf(l), now), true, refused
}
