package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/sirupsen/logrus"
)

// API is the subset of *dynamodb.Client that the store uses. A hand-written
// fake can stand in for the client. Instrumentation is not a wrapper of API:
// it is a client option that hangs middleware on the SDK's stack (see
// NewClient), so that it observes every operation of the client.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	// Scan and BatchWriteItem serve the admin commands only (namespace
	// orphans and purge): the service's policy grants neither.
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Sentinel errors callers branch on. Every error the store returns from a
// DynamoDB call wraps exactly one of ErrUnavailable, ErrThrottled,
// ErrConflict, ErrNotFound and ErrSchema (ErrNoTable and ErrNoCredentials
// wrap ErrUnavailable).
var (
	// ErrUnavailable: DynamoDB did not answer in time, refused the
	// connection, answered with a server error, or the table is missing.
	ErrUnavailable = errors.New("dynamo: unavailable")
	// ErrNoTable: the table does not exist (ResourceNotFoundException) in
	// the region at the endpoint the client talks to. It wraps
	// ErrUnavailable: to a decision, a missing table is a store that is not
	// there.
	ErrNoTable = fmt.Errorf("dynamo: table does not exist: %w", ErrUnavailable)
	// ErrNoCredentials: the client found no AWS credentials to sign the
	// call with (no keys, profile or role). It wraps ErrUnavailable.
	ErrNoCredentials = fmt.Errorf("dynamo: no credentials: %w", ErrUnavailable)
	// ErrThrottled: DynamoDB throttled the call (throughput or request limits).
	ErrThrottled = errors.New("dynamo: throttled")
	// ErrSchema: the table's schema version record is missing or unknown
	// (item.ErrSchema).
	ErrSchema = item.ErrSchema
	// ErrConflict: a conditional write kept losing races (or a transaction
	// conflicted) beyond the retry budget.
	ErrConflict = errors.New("dynamo: conflict")
	// ErrNotFound: an admin record (entity, namespace, limits) does not exist.
	ErrNotFound = errors.New("dynamo: not found")
)

// ErrCondition marks a failed condition: a decision input, never returned.
var ErrCondition = errors.New("dynamo: condition failed")

// Classify maps an error from the SDK to a sentinel, once, where it enters.
// Conditional-check failures become errCondition.
func Classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("dynamo: %s: %w", op, ErrCondition)
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return fmt.Errorf("dynamo: %s: %w", op, ErrCondition)
			}
		}
		for _, r := range tce.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
				return fmt.Errorf("dynamo: %s: %w: %w", op, ErrThrottled, err)
			}
		}
		return fmt.Errorf("dynamo: %s: %w: %w", op, ErrConflict, err)
	}
	var tcf *types.TransactionConflictException
	if errors.As(err, &tcf) {
		return fmt.Errorf("dynamo: %s: %w: %w", op, ErrConflict, err)
	}
	var pte *types.ProvisionedThroughputExceededException
	var rle *types.RequestLimitExceeded
	if errors.As(err, &pte) || errors.As(err, &rle) {
		return fmt.Errorf("dynamo: %s: %w: %w", op, ErrThrottled, err)
	}
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) {
		return fmt.Errorf("dynamo: %s: %w: %w", op, ErrNoTable, err)
	}
	if strings.Contains(err.Error(), "get identity: ") {
		// The SDK's signing step found no credentials; it has no error
		// type for it, only this text (service/dynamodb's auth.go).
		return fmt.Errorf("dynamo: %s: %w: %w", op, ErrNoCredentials, err)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ThrottlingException", "Throttling", "TooManyRequestsException":
			return fmt.Errorf("dynamo: %s: %w: %w", op, ErrThrottled, err)
		}
	}
	return fmt.Errorf("dynamo: %s: %w: %w", op, unavailable(err), err)
}

// AdminTimeout is the least budget of one DynamoDB call that serves no
// decision (admin commands, the usage history, the stream's checkpoints):
// Table.Call gives such a call the larger of it and Table.Timeout.
const AdminTimeout = 5 * time.Second

// Table is the handle through which every room of pkg/dynamo reaches the
// table: the client, the table's name, the deployment's namespace, the
// budget of a call, the clock, the logger and who the audit records name.
// Errors of its calls are classified once, where they enter (Classify).
type Table struct {
	// API is the DynamoDB client.
	API API
	// Name is the table's name.
	Name string
	// Namespace is the namespace of a call whose own is empty.
	Namespace string
	// Timeout is the budget of a decision's call (Config.Timeout).
	Timeout time.Duration
	// Now is the clock (WithClock).
	Now func() time.Time
	// Log is the logger.
	Log *logrus.Entry
	// Principal is who the audit records name (WithPrincipal).
	Principal string
}

// NsOr returns ns, or the table's namespace when ns is empty.
func (t *Table) NsOr(ns string) string {
	if ns == "" {
		return t.Namespace
	}
	return ns
}

// Call bounds one call that serves no decision: the larger of Timeout and
// AdminTimeout.
func (t *Table) Call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(t.Timeout, AdminTimeout))
}

// Get reads the item pk, sk, strongly consistent, within Call's budget. An
// absent item is an empty map and no error.
func (t *Table) Get(ctx context.Context, pk, sk string) (map[string]types.AttributeValue, error) {
	cctx, cancel := t.Call(ctx)
	defer cancel()
	out, err := t.API.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(t.Name), Key: item.Key(pk, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, Classify("get "+t.Name, err)
	}
	return out.Item, nil
}

// Query runs in on the table, page by page (dynamodb.NewQueryPaginator),
// each page within Call's budget, and hands each page's items to page. An
// error is classified as op's.
func (t *Table) Query(ctx context.Context, op string, in *dynamodb.QueryInput, page func(items []map[string]types.AttributeValue)) error {
	if in.TableName == nil {
		in.TableName = aws.String(t.Name)
	}
	p := dynamodb.NewQueryPaginator(t.API, in)
	for p.HasMorePages() {
		cctx, cancel := t.Call(ctx)
		out, err := p.NextPage(cctx)
		cancel()
		if err != nil {
			return Classify(op, err)
		}
		page(out.Items)
	}
	return nil
}
