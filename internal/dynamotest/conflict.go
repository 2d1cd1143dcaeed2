package dynamotest

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// txn is a TransactWriteItems in flight, under Options.Conflicts: it holds
// its items from when it is sent to when it commits or is cancelled.
type txn struct {
	keys     []string        // its items (itemKey), in TransactItems order
	prepared bool            // past its prepare round
	hit      map[string]bool // items a single write changed while it prepared
}

// itemKey names an item across tables.
func itemKey(table *string, key map[string]types.AttributeValue) string {
	return aws.ToString(table) + "\x00" + keyOf(key)
}

// single runs body, a write of one item (PutItem, UpdateItem, DeleteItem),
// as a call: refused with TransactionConflictException when a transaction
// past its prepare round holds the item; a write that lands while a
// transaction is preparing on the item cancels that transaction. body says
// whether the write landed.
func (f *Fake) single(ctx context.Context, table *string, key map[string]types.AttributeValue, body func() (landed bool, err error)) error {
	return f.call(ctx, writeCall, func() error {
		k := itemKey(table, key)
		tx := f.pending[k]
		if tx != nil && tx.prepared {
			return &types.TransactionConflictException{Message: aws.String("Transaction is ongoing for the item")}
		}
		landed, err := body()
		if landed && tx != nil {
			tx.hit[k] = true
		}
		return err
	})
}

// begin registers a transaction of in on its items, under
// Options.Conflicts (else it returns nil): it is cancelled, with reason
// TransactionConflict for those items, when another transaction holds any
// of them.
func (f *Fake) begin(in *dynamodb.TransactWriteItemsInput) (*txn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.model.Conflicts {
		return nil, nil
	}
	tx := &txn{hit: map[string]bool{}}
	busy := false
	for _, ti := range in.TransactItems {
		a, err := actionOf(ti)
		if err != nil {
			return nil, err
		}
		k := itemKey(a.table, a.key)
		tx.keys = append(tx.keys, k)
		busy = busy || f.pending[k] != nil
	}
	if busy {
		return nil, conflicted(tx.keys, func(k string) bool { return f.pending[k] != nil })
	}
	for _, k := range tx.keys {
		f.pending[k] = tx
	}
	return tx, nil
}

// prepare ends tx's prepare round: cancelled, with reason
// TransactionConflict for those items, when a single write landed on any of
// its items since it began; else it holds its items until it ends.
func (f *Fake) prepare(tx *txn) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tx == nil {
		return nil
	}
	if len(tx.hit) > 0 {
		return conflicted(tx.keys, func(k string) bool { return tx.hit[k] })
	}
	tx.prepared = true
	return nil
}

// end releases tx's items.
func (f *Fake) end(tx *txn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endLocked(tx)
}

func (f *Fake) endLocked(tx *txn) {
	if tx == nil {
		return
	}
	for _, k := range tx.keys {
		if f.pending[k] == tx {
			delete(f.pending, k)
		}
	}
}

// conflicted is a transaction cancelled for a conflict on the items of keys
// for which hit holds.
func conflicted(keys []string, hit func(k string) bool) error {
	reasons := make([]types.CancellationReason, len(keys))
	for i, k := range keys {
		reasons[i].Code = aws.String("None")
		if hit(k) {
			reasons[i].Code = aws.String("TransactionConflict")
			reasons[i].Message = aws.String("Transaction is ongoing for the item")
		}
	}
	return &types.TransactionCanceledException{Message: aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons"), CancellationReasons: reasons}
}
