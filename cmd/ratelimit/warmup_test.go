package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	dadmin "github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/warm"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// TestWarmDynamoWaits: while DynamoDB refuses connections or hangs,
// the warm-up keeps trying, logs the first failure at once and an error each
// 30 s window with what to check, and decisions meanwhile fail as DynamoDB
// not answering; once DynamoDB answers it returns within 11 s (a call in
// flight ends by its 5 s deadline, then at most 5 s of backoff).
// A table of another schema stops it with the error.
func TestWarmDynamoWaits(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name  string
		fail  func(ctx context.Context, op string) error
		check string // in the logged errors
	}{
		{"unreachable", func(context.Context, string) error { return refused }, "DynamoDB did not answer: check DYNAMODB_ENDPOINT"},
		{"hanging", func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }, "DynamoDB did not answer: check DYNAMODB_ENDPOINT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := dynamotest.NewFake()
				if err := dadmin.CreateTable(context.Background(), f, "t"); err != nil {
					t.Fatal(err)
				}
				var down atomic.Bool
				down.Store(true)
				f.SetFail(func(ctx context.Context, op string) error {
					if down.Load() {
						return c.fail(ctx, op)
					}
					return nil
				})
				var logs bytes.Buffer
				log := logrus.New()
				log.SetOutput(&logs)
				log.SetFormatter(&logrus.JSONFormatter{})
				w := &warming{}
				defer w.close()
				open := func(ctx context.Context) (*dynamo.Store, error) {
					return dynamo.NewStore(ctx, f, dynamo.Config{Table: "t", Timeout: 400 * time.Millisecond})
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				start := time.Now()
				go func() {
					done <- warmup{open: open, options: warm.Options{Conns: 2}, window: 30 * time.Second, explain: noExplain, log: logrus.NewEntry(log)}.run(ctx, w)
				}()

				time.Sleep(80 * time.Second)
				synctest.Wait()
				select {
				case err := <-done:
					t.Fatalf("warmup.run() = %v after %v while DynamoDB is down, want it still waiting", err, time.Since(start))
				default:
				}
				if _, err := w.Acquire(ctx, demoPlan()); !errors.Is(err, dynamo.ErrUnavailable) {
					t.Errorf("Acquire() while warming = %v, want ErrUnavailable", err)
				}
				lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
				var warns, errs int
				for _, l := range lines {
					switch {
					case strings.Contains(l, `"level":"warning"`) && strings.Contains(l, "dynamodb warm-up failed"):
						warns++
					case strings.Contains(l, `"level":"error"`) && strings.Contains(l, "BACKEND_WARMUP_TIMEOUT"):
						errs++
					default:
						continue
					}
					if !strings.Contains(l, c.check) {
						t.Errorf("log line %s, want it to say %q", l, c.check)
					}
				}
				if warns != 1 || errs != 2 {
					t.Errorf("after 80 s down: %d warnings and %d errors logged, want 1 at once and 1 per 30 s window, the attempts being up to 10 s apart (2):\n%s", warns, errs, logs.String())
				}

				down.Store(false)
				up := time.Now()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("warmup.run() = %v once DynamoDB answers, want nil", err)
					}
				case <-time.After(time.Minute):
					t.Fatal("warmup.run() still waiting a minute after DynamoDB answers")
				}
				if took := time.Since(up); took > 11*time.Second {
					t.Errorf("ready %v after DynamoDB answered, want within 11 s (a call in flight ends by its 5 s deadline, then at most 5 s of backoff)", took)
				}
				if _, err := w.Acquire(ctx, demoPlan()); err != nil {
					t.Errorf("Acquire() after the warm-up = %v, want nil", err)
				}
				if !strings.Contains(logs.String(), "dynamodb store ready") {
					t.Errorf("no 'dynamodb store ready' line logged:\n%s", logs.String())
				}
			})
		})
	}
}

// TestWarmDynamoGivesUp: what waiting cannot mend, a missing table or one
// without this build's schema version, is returned at once, explained.
func TestWarmDynamoGivesUp(t *testing.T) {
	cases := []struct {
		name  string
		table func(f *dynamotest.Fake) error
		want  error
		text  string
	}{
		{"no table", func(*dynamotest.Fake) error { return nil }, dynamo.ErrNoTable, "explained: "},
		{"no schema version", func(f *dynamotest.Fake) error {
			_, err := f.CreateTable(context.Background(), bareTable("t"))
			return err
		}, dynamo.ErrSchema, "ratelimit table create"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := dynamotest.NewFake()
				if err := c.table(f); err != nil {
					t.Fatal(err)
				}
				open := func(ctx context.Context) (*dynamo.Store, error) {
					return dynamo.NewStore(ctx, f, dynamo.Config{Table: "t", Timeout: 400 * time.Millisecond})
				}
				log := logrus.New()
				log.SetOutput(&bytes.Buffer{})
				w := &warming{}
				defer w.close()
				explain := func(err error) error { return fmt.Errorf("explained: %w", err) }
				err := warmup{open: open, window: 30 * time.Second, explain: explain, log: logrus.NewEntry(log)}.run(context.Background(), w)
				if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
					t.Errorf("warmup.run() = %v, want an error wrapping %v that says %q", err, c.want, c.text)
				}
			})
		})
	}
}

func noExplain(err error) error { return err }

// TestBinaryWaitsForDynamoDB starts the binary with a DynamoDB endpoint
// where nothing listens yet: the listeners answer at once, gRPC health says
// NOT_SERVING and /healthcheck 503 naming the warm-up, the log says what to
// check; once DynamoDB answers there (a proxy to DynamoDB Local), both say
// SERVING.
func TestBinaryWaitsForDynamoDB(t *testing.T) {
	local := dynamotest.Shared(t)
	env := dynamoEnv(t, "BACKEND_TIMEOUT=400ms", "ON_UNAVAILABLE=block", "BACKEND_WARMUP_TIMEOUT=2s")
	late := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	setEnv(env, "DYNAMODB_ENDPOINT", "http://"+late)
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startBinaryUnready(t, dir, env...)

	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := func() (healthpb.HealthCheckResponse_ServingStatus, int, string) {
		r, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("gRPC health check: %v", err)
		}
		resp, err := http.Get("http://" + p.HTTPAddr() + "/healthcheck")
		if err != nil {
			t.Fatalf("GET /healthcheck: %v", err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		return r.GetStatus(), resp.StatusCode, body.String()
	}
	// Past two warm-up windows with DynamoDB away: still not ready, and it
	// said why.
	time.Sleep(5 * time.Second)
	if st, code, body := health(); st != healthpb.HealthCheckResponse_NOT_SERVING || code != 503 || !strings.Contains(body, "dynamodb warm-up") {
		t.Errorf("health while DynamoDB is away = %v, %d %q, want NOT_SERVING, 503 naming the dynamodb warm-up", st, code, body)
	}
	if out := p.Output(); !strings.Contains(out, "check DYNAMODB_ENDPOINT") || !strings.Contains(out, "BACKEND_WARMUP_TIMEOUT") {
		t.Errorf("log while DynamoDB is away does not say to check DYNAMODB_ENDPOINT and that the warm-up timed out:\n%s", out)
	}

	envoytest.ListenDelayProxy(t, late, strings.TrimPrefix(local.Endpoint(), "http://"), 0)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, code, _ := health()
		if st == healthpb.HealthCheckResponse_SERVING && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health 20 s after DynamoDB answered = %v, %d, want SERVING, 200\n%s", st, code, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(p.Output(), "dynamodb store ready") {
		t.Errorf("no 'dynamodb store ready' line logged:\n%s", p.Output())
	}
}

// setEnv sets name to value in env, a list of settings that holds it.
func setEnv(env []string, name, value string) {
	for i, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			env[i] = name + "=" + value
		}
	}
}

// bareTable is a table with the store's keys and nothing in it.
func bareTable(name string) *dynamodb.CreateTableInput {
	str := types.ScalarAttributeTypeS
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("PK"), AttributeType: str}, {AttributeName: aws.String("SK"), AttributeType: str}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("PK"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("SK"), KeyType: types.KeyTypeRange}},
	}
}

// demoPlan is one debit of one token on a bucket of 3 a minute.
func demoPlan() *cascade.Plan {
	l, err := tokenbucket.Rate(3, time.Minute, 0)
	if err != nil {
		panic(err)
	}
	return &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "generic_key=demo", Resource: "example"}, Limit: "default", Bucket: l, Amount: 1000}}}
}

// TestWarmingWaitsForTheStore: a decision that arrives before the store is
// open waits for it within its budget and is then decided by the store, not
// answered as DynamoDB not answering; one whose budget ends first fails as
// unavailable (and ON_UNAVAILABLE answers it, as any call past its budget).
func TestWarmingWaitsForTheStore(t *testing.T) {
	cases := []struct {
		name    string
		openIn  time.Duration
		wantErr bool
	}{
		{"opened within the budget", 100 * time.Millisecond, false},
		{"budget ends first", time.Second, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := dynamotest.NewFake()
				if err := dadmin.CreateTable(context.Background(), f, "t"); err != nil {
					t.Fatal(err)
				}
				w := &warming{wait: 400 * time.Millisecond}
				defer w.close()
				type result struct {
					d    cascade.Decision
					err  error
					took time.Duration
				}
				got := make(chan result, 1)
				start := time.Now()
				go func() {
					d, err := w.Acquire(context.Background(), demoPlan())
					got <- result{d, err, time.Since(start)}
				}()
				time.Sleep(c.openIn)
				st, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t", Timeout: 400 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				w.set(st)
				r := <-got
				if c.wantErr {
					if !errors.Is(r.err, dynamo.ErrUnavailable) {
						t.Errorf("Acquire() with the store opened after its budget = %v, want ErrUnavailable", r.err)
					}
					if r.took != 400*time.Millisecond {
						t.Errorf("Acquire() gave up after %v, want its budget of 400ms", r.took)
					}
					return
				}
				if r.err != nil || !r.d.Admitted {
					t.Errorf("Acquire() with the store opened within its budget = %+v, %v; want decided by the store (admitted)", r.d, r.err)
				}
			})
		})
	}
}

// TestWarmupHints: what a failed warm-up says to check follows the store's
// classification of the SDK's error (dynamo.Cause), not its text.
func TestWarmupHints(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"no table", &types.ResourceNotFoundException{Message: aws.String("Cannot do operations on a non-existent table")}, "the table does not exist"},
		{"access denied", &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: dynamodb:GetItem"}, "the credentials are refused or lack a permission"},
		{"unknown key id", &smithy.GenericAPIError{Code: "UnrecognizedClientException", Message: "The security token included in the request is invalid."}, "the credentials are refused or lack a permission"},
		{"no credentials", errors.New("failed to sign request: failed to retrieve credentials: get identity: no credentials"), "no AWS credentials were found"},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "DynamoDB did not answer"},
		{"no such host", &net.DNSError{Err: "no such host", Name: "dynamodb.nowhere", IsNotFound: true}, "DynamoDB did not answer"},
		{"throttled", &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}, "DynamoDB throttled the warm-up"},
		{"server error", &smithy.GenericAPIError{Code: "InternalServerError"}, "check DYNAMODB_ENDPOINT, AWS_REGION, DYNAMODB_TABLE and the credentials"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := dynamotest.NewFake()
			if err := dadmin.CreateTable(context.Background(), f, "t"); err != nil {
				t.Fatal(err)
			}
			f.SetFail(func(context.Context, string) error { return c.err })
			_, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t"})
			if err == nil {
				t.Fatal("NewStore() = nil with every call failing")
			}
			if got := warmupHint(err); !strings.Contains(got, c.want) {
				t.Errorf("warmupHint(%v) = %q, want it to say %q", err, got, c.want)
			}
		})
	}
}
