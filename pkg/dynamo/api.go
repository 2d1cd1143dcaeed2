package dynamo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
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

// errCondition marks a failed condition: a decision input, never returned.
var errCondition = errors.New("dynamo: condition failed")

// classify maps an error from the SDK to a sentinel, once, where it enters.
// Conditional-check failures become errCondition.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("dynamo: %s: %w", op, errCondition)
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return fmt.Errorf("dynamo: %s: %w", op, errCondition)
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
	return fmt.Errorf("dynamo: %s: %w: %w", op, ErrUnavailable, err)
}

// NewClient returns a DynamoDB client for region (DefaultRegion when
// empty), talking to endpoint when it is not empty (DynamoDB Local, or a VPC
// endpoint). The client makes one attempt per call (the store's deadlines
// bound every call, and a retry is the store's decision). For an endpoint
// outside amazonaws.com (DynamoDB Local) it uses the environment's
// credentials as the AWS CLI finds them (keys, AWS_PROFILE or the default
// profile, web identity, a container's endpoint; not the instance metadata
// service), and LocalAccessKeyID only when there are none, so that it sees
// the same DynamoDB Local database as `aws dynamodb --endpoint-url`; and it
// skips response-checksum validation: DynamoDB Local's error responses
// carry no x-amz-crc32. optFns are applied
// after these (metrics.DynamoDB and tracing.DynamoDB instrument the client
// this way).
func NewClient(ctx context.Context, endpoint, region string, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	if region == "" {
		region = DefaultRegion
	}
	local := isLocalEndpoint(endpoint)
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(region),
		config.WithRetryMaxAttempts(1),
		config.WithHTTPClient(awshttp.NewBuildableClient().
			WithDialerOptions(func(d *net.Dialer) { d.Timeout = 2 * time.Second }).
			WithTransportOptions(func(tr *http.Transport) {
				tr.MaxIdleConns = 256
				tr.MaxIdleConnsPerHost = 256
			})),
	}
	if local {
		// The instance metadata service is not asked for a local
		// endpoint: off EC2 it only makes a start wait for its timeout.
		opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("dynamo: load aws config: %w", err)
	}
	if local && !hasCredentials(ctx, cfg.Credentials) {
		cfg.Credentials = credentials.NewStaticCredentialsProvider(LocalAccessKeyID, "local", "")
	}
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		if local {
			o.DisableValidateResponseChecksum = true
		}
	}}, optFns...)...), nil
}

// LocalAccessKeyID is the access key id NewClient signs with on a local
// endpoint when the environment has no credentials. DynamoDB Local keeps
// one database per access key id and region: `aws dynamodb --endpoint-url`
// run with the same environment sees the same one.
const LocalAccessKeyID = "local"

// localCredentialsWait bounds the look for the environment's credentials
// on a local endpoint (a profile's role or SSO may call AWS).
const localCredentialsWait = 5 * time.Second

// hasCredentials reports whether the default chain found credentials: keys
// in the environment, a profile of the shared files, web identity, a
// container's endpoint, a credential process.
func hasCredentials(ctx context.Context, p aws.CredentialsProvider) bool {
	if p == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, localCredentialsWait)
	defer cancel()
	c, err := p.Retrieve(ctx)
	return err == nil && c.HasKeys()
}

func isLocalEndpoint(endpoint string) bool {
	if endpoint == "" {
		return false
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	return !strings.HasSuffix(host, ".amazonaws.com") && !strings.HasSuffix(host, ".amazonaws.com.cn")
}
