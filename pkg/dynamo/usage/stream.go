package usage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// The stream poller's records, under the table's system partition (the
// stream is the table's, whatever the namespaces): one checkpoint per
// stream shard, and one lease, so that one poller of a table reads it at a
// time.
const (
	skStreamShard = "#STREAM#" // + shard id
	skStreamLease = "#STREAMLEASE"
	attrSequence  = "seq"
	attrClosed    = "closed"
	attrOwner     = "owner"
	attrUntil     = "until"
	// streamRecordLife is how long a checkpoint outlives its last write:
	// a stream keeps its records 24 hours.
	streamRecordLife = 48 * time.Hour
)

// Checkpoint is how far the poller has read one stream shard.
type Checkpoint struct {
	// Sequence is the sequence number of the last record processed; empty
	// when none was.
	Sequence string
	// Closed: the shard was closed and every record of it processed.
	Closed bool
}

// StreamCheckpoint returns the checkpoint of a stream shard (zero when it
// has none).
func (s *Store) StreamCheckpoint(ctx context.Context, shard string) (Checkpoint, error) {
	it, err := s.t.Get(ctx, item.VersionPK, skStreamShard+shard)
	if err != nil {
		return Checkpoint{}, err
	}
	cp := Checkpoint{Sequence: item.GetS(it, attrSequence)}
	if b, ok := it[attrClosed].(*types.AttributeValueMemberBOOL); ok {
		cp.Closed = b.Value
	}
	return cp, nil
}

// SetStreamCheckpoint records a stream shard's checkpoint on behalf of
// owner, on the condition that owner holds the poller's lease: a poller
// that lost its lease (paused past its lifetime while another took over)
// does not move the checkpoint back. It returns ErrConflict when owner
// does not hold the lease.
func (s *Store) SetStreamCheckpoint(ctx context.Context, owner, shard string, cp Checkpoint) error {
	if shard == "" {
		return errors.New("dynamo: stream checkpoint: empty shard id")
	}
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	_, err := s.t.API.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{
			TableName:                 aws.String(s.t.Name),
			Key:                       item.Key(item.VersionPK, skStreamLease),
			ConditionExpression:       aws.String("#o = :me"),
			ExpressionAttributeNames:  map[string]string{"#o": attrOwner},
			ExpressionAttributeValues: map[string]types.AttributeValue{":me": item.StrAV(owner)},
		}},
		{Put: &types.Put{
			TableName: aws.String(s.t.Name),
			Item: map[string]types.AttributeValue{
				item.AttrPK: item.StrAV(item.VersionPK), item.AttrSK: item.StrAV(skStreamShard + shard),
				attrSequence: item.StrAV(cp.Sequence), attrClosed: &types.AttributeValueMemberBOOL{Value: cp.Closed},
				item.AttrTTL: item.NumAV(s.t.Now().Add(streamRecordLife).Unix()),
			},
		}},
	}})
	if err != nil {
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) && len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
			return fmt.Errorf("dynamo: stream checkpoint of %s: %s does not hold the poller's lease: %w", shard, owner, dynamo.ErrConflict)
		}
		return dynamo.Classify("stream checkpoint "+s.t.Name, err)
	}
	return nil
}

// StreamLease takes or renews the poller's lease of the table's stream for
// owner until now + ttl, and reports whether owner holds it: it does when
// nobody held it, when owner did, or when the holder's time has passed.
func (s *Store) StreamLease(ctx context.Context, owner string, ttl time.Duration) (bool, error) {
	if owner == "" {
		return false, errors.New("dynamo: stream lease: empty owner")
	}
	now := s.t.Now()
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	_, err := s.t.API.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.t.Name),
		Key:                      item.Key(item.VersionPK, skStreamLease),
		UpdateExpression:         aws.String("SET #o = :me, #u = :until, #t = :ttl"),
		ConditionExpression:      aws.String("attribute_not_exists(#o) OR #o = :me OR #u <= :now"),
		ExpressionAttributeNames: map[string]string{"#o": attrOwner, "#u": attrUntil, "#t": item.AttrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": item.StrAV(owner), ":until": item.NumAV(now.Add(ttl).UnixMilli()), ":now": item.NumAV(now.UnixMilli()),
			":ttl": item.NumAV(now.Add(ttl + streamRecordLife).Unix()),
		},
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return false, nil
		}
		return false, dynamo.Classify("stream lease "+s.t.Name, err)
	}
	return true, nil
}

// StreamLeaseHolder returns who holds the poller's lease and until when
// (empty when nobody ever did).
func (s *Store) StreamLeaseHolder(ctx context.Context) (string, time.Time, error) {
	it, err := s.t.Get(ctx, item.VersionPK, skStreamLease)
	if err != nil {
		return "", time.Time{}, err
	}
	return item.GetS(it, attrOwner), time.UnixMilli(item.GetN(it, attrUntil)), nil
}

// NewStreamsClient returns a DynamoDB Streams client that reaches the
// table's stream as c reaches the table: its region, endpoint, credentials
// and HTTP client (the stream poller, `ratelimit aggregator`).
func NewStreamsClient(c *dynamodb.Client) *dynamodbstreams.Client {
	o := c.Options()
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region:           o.Region,
		BaseEndpoint:     o.BaseEndpoint,
		Credentials:      o.Credentials,
		HTTPClient:       o.HTTPClient,
		RetryMaxAttempts: 3,
	})
}

// StreamARN returns the table's latest stream (DescribeTable), or an
// error when the table has no stream enabled.
func (s *Store) StreamARN(ctx context.Context) (string, error) {
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	out, err := s.t.API.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.t.Name)})
	if err != nil {
		return "", dynamo.Classify("describe "+s.t.Name, err)
	}
	if out.Table == nil || out.Table.LatestStreamArn == nil {
		return "", fmt.Errorf("dynamo: table %s has no stream: enable one with NEW_AND_OLD_IMAGES (`ratelimit table create` does)", s.t.Name)
	}
	return *out.Table.LatestStreamArn, nil
}
