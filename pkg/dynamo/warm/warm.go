package warm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/sirupsen/logrus"
)

// Warm-up defaults and bounds.
const (
	// DefaultConns is how many connections Run opens when Options.Conns
	// is not set.
	DefaultConns = 8
	// warmMinRounds and warmMaxRounds bound the rounds of calls Warm makes
	// on each connection.
	warmMinRounds = 2
	warmMaxRounds = 5
	// warmFast is the slowest call of a round, at most, after which Warm
	// stops early (or Config.Timeout/2, when that is less).
	warmFast = 25 * time.Millisecond
	// warmItemTTL is how long a warm-up item lives past its last write
	// (DynamoDB's TTL deletes it; each start writes the same few items).
	warmItemTTL = time.Hour
)

// warmSK is the sort key of the warm-up items, n{ns}/WARMUP#{i}: no other
// record has a PK with /WARMUP#, and the items sit under the namespace's
// prefix, so a policy confining a principal to n{ns}/* allows them.
const warmSK = "#WARMUP"

// Options says how Run readies a store.
type Options struct {
	// Conns is how many connections to DynamoDB to open, in parallel, so
	// that the first concurrent decisions do not each dial one
	// (DefaultConns when zero or less).
	Conns int
	// Credentials, when set, are resolved first: the client caches them,
	// so the first decision does not wait on IMDS or STS.
	Credentials aws.CredentialsProvider
}

// Report is what Run did.
type Report struct {
	// DescribeSkipped: the principal may not call DescribeTable, so the
	// Key schema was not checked (the schema version record was).
	DescribeSkipped bool
	// Rounds is how many rounds of calls each connection made.
	Rounds int
	// Slowest is the slowest call of each round.
	Slowest []time.Duration
}

// Run readies a store, through its table handle, for its first decisions, which would otherwise pay
// for what happens once: resolving credentials, dialling connections (TLS
// on AWS), and, on DynamoDB Local, its JVM's first run of each kind of call
// (the first conditional write there takes tens of milliseconds, past a
// tight BACKEND_TIMEOUT). In order, it
//
//   - resolves o.Credentials;
//   - describes the table: it must be ACTIVE with the key schema and the
//     GSI1 index CreateTable makes (a mismatch wraps ErrSchema); a principal
//     denied DescribeTable skips this check (Report.DescribeSkipped);
//   - on o.Conns connections at once, makes rounds of every kind of call a
//     decision makes, on warm-up items of its own under the namespace: a
//     strongly consistent GetItem (a cold bucket), a BatchGetItem (stored
//     limits), a conditional UpdateItem that succeeds (ALL_NEW) and one
//     whose condition fails (ALL_OLD), until a round's slowest call is
//     within the decision budget/2 and 25 ms (at least 2 rounds, at most 5:
//     DynamoDB answers within that on the first rounds, after the
//     connections are open; on DynamoDB Local the first rounds take the
//     JVM's first runs of each kind of call, 150-400 ms at the slowest on
//     a busy 2-core machine, and later rounds still vary with its load).
//
// Each item written is one small record per connection, written again at
// every start, with a TTL of an hour. Each call is bounded by ctx and by the
// table handle's admin deadline. The error names the step that failed and wraps
// the store's sentinel (dynamo.ErrUnavailable, ErrThrottled, ErrSchema).
func Run(ctx context.Context, t *dynamo.Table, o Options) (Report, error) {
	s := warmer{t}
	var rep Report
	if o.Credentials != nil {
		cctx, cancel := s.Call(ctx)
		_, err := o.Credentials.Retrieve(cctx)
		cancel()
		if err != nil {
			return rep, fmt.Errorf("dynamo: warm-up: resolve AWS credentials: %w: %w", dynamo.ErrNoCredentials, err)
		}
	}
	skipped, err := s.describe(ctx)
	if err != nil {
		return rep, err
	}
	rep.DescribeSkipped = skipped
	conns := o.Conns
	if conns <= 0 {
		conns = DefaultConns
	}
	fast := min(t.Timeout/2, warmFast)
	for rep.Rounds < warmMaxRounds {
		slowest, err := s.warmRound(ctx, conns)
		if err != nil {
			return rep, err
		}
		rep.Rounds++
		rep.Slowest = append(rep.Slowest, slowest)
		t.Log.WithFields(logrus.Fields{"round": rep.Rounds, "slowest_ms": float64(slowest.Microseconds()) / 1000}).Debug("warm-up round")
		if rep.Rounds >= warmMinRounds && slowest <= fast {
			break
		}
	}
	return rep, nil
}

// describe checks the table's status and key schema. It reports true when
// the principal may not describe the table.
func (s warmer) describe(ctx context.Context) (bool, error) {
	cctx, cancel := s.Call(ctx)
	defer cancel()
	out, err := s.API.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.Name)})
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "AccessDeniedException" {
			return true, nil
		}
		return false, fmt.Errorf("dynamo: warm-up: %w", dynamo.Classify("describe table "+s.Name, err))
	}
	if err := checkTable(out.Table); err != nil {
		return false, fmt.Errorf("dynamo: warm-up: table %s: %w", s.Name, err)
	}
	return false, nil
}

// checkTable checks what a store needs of a described table: ACTIVE, the
// Key schema (PK, SK: strings) and GSI1 on GSI1PK, GSI1SK.
func checkTable(t *types.TableDescription) error {
	if t == nil {
		return fmt.Errorf("no description: %w", dynamo.ErrUnavailable)
	}
	if t.TableStatus != types.TableStatusActive {
		return fmt.Errorf("status %s, want ACTIVE: %w", t.TableStatus, dynamo.ErrUnavailable)
	}
	attrTypes := map[string]types.ScalarAttributeType{}
	for _, a := range t.AttributeDefinitions {
		attrTypes[aws.ToString(a.AttributeName)] = a.AttributeType
	}
	keys := func(ks []types.KeySchemaElement) string {
		var parts []string
		for _, k := range ks {
			name := aws.ToString(k.AttributeName)
			parts = append(parts, fmt.Sprintf("%s %s %s", name, k.KeyType, attrTypes[name]))
		}
		return fmt.Sprint(parts)
	}
	want := fmt.Sprintf("[%s HASH S %s RANGE S]", item.AttrPK, item.AttrSK)
	if got := keys(t.KeySchema); got != want {
		return fmt.Errorf("key schema %s, want %s (a table made by `ratelimit table create` or the same definition): %w", got, want, item.ErrSchema)
	}
	wantGSI := fmt.Sprintf("[%s HASH S %s RANGE S]", item.AttrGSI1PK, item.AttrGSI1SK)
	i := slices.IndexFunc(t.GlobalSecondaryIndexes, func(g types.GlobalSecondaryIndexDescription) bool {
		return aws.ToString(g.IndexName) == "GSI1"
	})
	if i < 0 {
		return fmt.Errorf("no index GSI1 (%s): %w", wantGSI, item.ErrSchema)
	}
	if got := keys(t.GlobalSecondaryIndexes[i].KeySchema); got != wantGSI {
		return fmt.Errorf("index GSI1 key schema %s, want %s: %w", got, wantGSI, item.ErrSchema)
	}
	return nil
}

// warmRound makes one round of every kind of call on conns connections at
// once and returns its slowest call.
func (s warmer) warmRound(ctx context.Context, conns int) (time.Duration, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		slowest time.Duration
		errs    []error
	)
	for i := range conns {
		wg.Go(func() {
			d, err := s.warmCalls(ctx, warmPK(s.Namespace, i))
			mu.Lock()
			defer mu.Unlock()
			slowest = max(slowest, d)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return 0, errs[0] // the others are alike
	}
	return slowest, nil
}

func warmPK(ns string, i int) string { return item.NSPart(ns) + "/WARMUP#" + strconv.Itoa(i) }

// warmCalls makes each kind of call a decision makes on the warm-up item
// pk, one after the other (so on one connection), and returns the slowest.
func (s warmer) warmCalls(ctx context.Context, pk string) (time.Duration, error) {
	var slowest time.Duration
	timed := func(what string, f func(context.Context) error) error {
		cctx, cancel := s.Call(ctx)
		defer cancel()
		start := time.Now()
		err := f(cctx)
		slowest = max(slowest, time.Since(start))
		if err != nil {
			return fmt.Errorf("dynamo: warm-up: %s: %w", what, err)
		}
		return nil
	}
	key := item.Key(pk, warmSK)
	if err := timed("GetItem", func(ctx context.Context) error {
		_, err := s.API.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.Name), Key: key,
			ConsistentRead: aws.Bool(true), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
		})
		return dynamo.Classify("get "+s.Name, err)
	}); err != nil {
		return 0, err
	}
	if err := timed("BatchGetItem", func(ctx context.Context) error {
		_, err := s.API.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems:           map[string]types.KeysAndAttributes{s.Name: {Keys: []map[string]types.AttributeValue{key}}},
			ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
		})
		return dynamo.Classify("batch get "+s.Name, err)
	}); err != nil {
		return 0, err
	}
	write := func(pass bool) func(context.Context) error {
		return func(ctx context.Context) error {
			e := item.NewExpr()
			e.SetAttr(item.AttrTTL, item.NumAV(s.Now().Add(warmItemTTL).Unix()))
			e.AddNum("n", 1)
			n := e.Name("n")
			if pass {
				e.Condition("attribute_not_exists(" + e.Name(item.AttrPK) + ") OR " + n + " >= " + e.Num(0))
			} else {
				e.Condition(n + " < " + e.Num(0))
			}
			_, err := s.API.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(s.Name), Key: key,
				UpdateExpression: e.Update(), ConditionExpression: e.ConditionExpr(),
				ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
				ReturnValues:                        types.ReturnValueAllNew,
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
				ReturnConsumedCapacity:              types.ReturnConsumedCapacityTotal,
			})
			err = dynamo.Classify("update "+s.Name, err)
			if !pass && errors.Is(err, dynamo.ErrCondition) {
				return nil // the refusal it was meant to make
			}
			if !pass && err == nil {
				return fmt.Errorf("a write whose condition cannot hold was applied: %w", dynamo.ErrUnavailable)
			}
			return err
		}
	}
	if err := timed("UpdateItem", write(true)); err != nil {
		return 0, err
	}
	if err := timed("UpdateItem (condition failing)", write(false)); err != nil {
		return 0, err
	}
	return slowest, nil
}

// warmer opens and warms a table handle's connections.
type warmer struct{ *dynamo.Table }
