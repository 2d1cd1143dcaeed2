package usage_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// streamed is the fake with a stream: every write call is serialised and
// appends a record (NEW_AND_OLD_IMAGES) per item it changed, as DynamoDB
// Streams would, stamped at.
type streamed struct {
	*dynamotest.Fake
	table string
	at    time.Time

	mu   sync.Mutex
	recs []usage.Record
}

func (st *streamed) images() map[string]map[string]types.AttributeValue {
	out := map[string]map[string]types.AttributeValue{}
	for _, it := range st.Items(st.table) {
		out[it["PK"].(*types.AttributeValueMemberS).Value+"|"+it["SK"].(*types.AttributeValueMemberS).Value] = it
	}
	return out
}

// write runs one write call and records what it changed.
func (st *streamed) write(call func() error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	before := st.images()
	err := call()
	after := st.images()
	for k, nw := range after {
		old, ok := before[k]
		switch {
		case !ok:
			st.add(usage.Insert, nil, nw)
		case !maps.EqualFunc(old, nw, func(a, b types.AttributeValue) bool { return fmt.Sprint(a) == fmt.Sprint(b) }):
			st.add(usage.Modify, old, nw)
		}
	}
	for k, old := range before {
		if _, ok := after[k]; !ok {
			st.add(usage.Remove, old, nil)
		}
	}
	return err
}

func (st *streamed) add(name string, old, nw map[string]types.AttributeValue) {
	id := fmt.Sprintf("ev-%06d", len(st.recs))
	st.recs = append(st.recs, usage.Record{ID: id, Name: name, Sequence: id, At: st.at, Old: old, New: nw})
}

func (st *streamed) records() []usage.Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]usage.Record(nil), st.recs...)
}

func (st *streamed) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.UpdateItemOutput, err error) {
	werr := st.write(func() error { out, err = st.Fake.UpdateItem(ctx, in, o...); return err })
	return out, werr
}

func (st *streamed) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.PutItemOutput, err error) {
	werr := st.write(func() error { out, err = st.Fake.PutItem(ctx, in, o...); return err })
	return out, werr
}

func (st *streamed) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.DeleteItemOutput, err error) {
	werr := st.write(func() error { out, err = st.Fake.DeleteItem(ctx, in, o...); return err })
	return out, werr
}

func (st *streamed) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (out *dynamodb.TransactWriteItemsOutput, err error) {
	werr := st.write(func() error { out, err = st.Fake.TransactWriteItems(ctx, in, o...); return err })
	return out, werr
}
