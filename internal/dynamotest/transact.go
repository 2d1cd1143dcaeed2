package dynamotest

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TransactWriteItems implements API (Update, Put and ConditionCheck): all
// of its items or none, cancelled with a reason for each item.
//
// Under Options, it is in flight for two draws of Latency.Write, its
// prepare round and then its commit round, and it takes effect as the
// commit round ends: its conditions and its partitions' throughput are
// checked then (a throttled item's reason is ThrottlingError). A context
// that ends in the prepare round cancels it; one that ends in the commit
// round does not (it commits, and answers the context's error).
//
// Under Options.Conflicts, as DynamoDB documents, it is cancelled with
// reason TransactionConflict for an item when another transaction is in
// flight on the item as it is sent, or when a PutItem, UpdateItem or
// DeleteItem of the item lands during its prepare round; and from the end
// of its prepare round to its commit, those single writes of its items are
// refused with TransactionConflictException.
func (f *Fake) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if err := f.enter(ctx, "TransactWriteItems"); err != nil {
		return nil, err
	}
	prep, commit := f.latency(writeCall), f.latency(writeCall)
	tx, err := f.begin(in)
	if werr := f.wait(ctx, prep); werr != nil {
		f.end(tx)
		return nil, werr
	}
	if err == nil {
		err = f.prepare(tx)
	}
	if err != nil {
		f.end(tx)
		return nil, err
	}
	werr := f.wait(ctx, commit)
	var out *dynamodb.TransactWriteItemsOutput
	err = f.locked(func() error {
		defer f.endLocked(tx)
		var err error
		out, err = f.transactLocked(in)
		return err
	})
	if werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// action is one item of a transaction.
type action struct {
	table  *string
	key    map[string]types.AttributeValue
	cond   *string
	names  map[string]string
	values map[string]types.AttributeValue
	ret    types.ReturnValuesOnConditionCheckFailure
}

// actionOf reads ti (an Update, a Put or a ConditionCheck).
func actionOf(ti types.TransactWriteItem) (action, error) {
	switch {
	case ti.Update != nil:
		u := ti.Update
		return action{u.TableName, u.Key, u.ConditionExpression, u.ExpressionAttributeNames, u.ExpressionAttributeValues, u.ReturnValuesOnConditionCheckFailure}, nil
	case ti.Put != nil:
		p := ti.Put
		return action{p.TableName, p.Item, p.ConditionExpression, p.ExpressionAttributeNames, p.ExpressionAttributeValues, p.ReturnValuesOnConditionCheckFailure}, nil
	case ti.ConditionCheck != nil:
		c := ti.ConditionCheck
		return action{c.TableName, c.Key, c.ConditionExpression, c.ExpressionAttributeNames, c.ExpressionAttributeValues, c.ReturnValuesOnConditionCheckFailure}, nil
	}
	return action{}, errors.New("fake: unsupported transact item")
}

// transactLocked runs in at once: its conditions, its partitions'
// throughput (twice an item's write units), then its writes.
func (f *Fake) transactLocked(in *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	failed := false
	type change struct {
		t    map[string]map[string]types.AttributeValue
		k    string
		item map[string]types.AttributeValue
	}
	var changes []change
	parts := make([]string, len(in.TransactItems)) // each item's partition
	units := map[string]float64{}                  // partition → write units
	for i, ti := range in.TransactItems {
		reasons[i].Code = aws.String("None")
		a, err := actionOf(ti)
		if err != nil {
			return nil, err
		}
		t, err := f.table(a.table)
		if err != nil {
			return nil, err
		}
		k := keyOf(a.key)
		old := t[k]
		ok, err := evalCond(a.cond, old, a.names, a.values)
		if err != nil {
			return nil, err
		}
		if !ok {
			failed = true
			reasons[i].Code = aws.String("ConditionalCheckFailed")
			if a.ret == types.ReturnValuesOnConditionCheckFailureAllOld {
				reasons[i].Item = clone(old)
			}
			continue
		}
		var item map[string]types.AttributeValue
		switch {
		case ti.Update != nil:
			if item, err = applyUpdate(old, a.key, ti.Update.UpdateExpression, a.names, a.values); err != nil {
				return nil, err
			}
			changes = append(changes, change{t, k, item})
		case ti.Put != nil:
			item = clone(ti.Put.Item)
			changes = append(changes, change{t, k, item})
		}
		parts[i] = partition(a.table, a.key)
		units[parts[i]] += 2 * writeUnits(old, item)
	}
	if failed {
		return nil, &types.TransactionCanceledException{Message: aws.String("transaction cancelled"), CancellationReasons: reasons}
	}
	if short := f.take(writeCall, units); len(short) > 0 {
		for i, p := range parts {
			if short[p] {
				reasons[i].Code = aws.String("ThrottlingError")
			}
		}
		return nil, &types.TransactionCanceledException{Message: aws.String("transaction cancelled"), CancellationReasons: reasons}
	}
	for _, c := range changes {
		c.t[c.k] = c.item
	}
	return &dynamodb.TransactWriteItemsOutput{ConsumedCapacity: []types.ConsumedCapacity{{CapacityUnits: aws.Float64(2 * float64(len(in.TransactItems)))}}}, nil
}
