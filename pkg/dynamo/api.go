package dynamo

import (
	"context"
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
)

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
