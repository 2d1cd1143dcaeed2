package warm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/warm"
)

// TestWarm: on a table made by CreateTable, on the fake and on DynamoDB
// Local, Warm opens its connections and makes every kind of call a decision
// makes, in 2 to 5 rounds, writing only its own items under the namespace.
func TestWarm(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) {
			api, table := b.API(t)
			s := newStoreCfg(t, api, dynamo.Config{Table: table, Namespace: "team-a", Timeout: 400 * time.Millisecond}, newClock())
			f, isFake := api.(*dynamotest.Fake)
			if isFake {
				f.ResetCalls()
			}
			rep, err := warm.Run(context.Background(), s.Table(), warm.Options{Conns: 4})
			if err != nil {
				t.Fatalf("Warm() = %v, want nil", err)
			}
			if rep.Rounds < 2 || rep.Rounds > 5 || len(rep.Slowest) != rep.Rounds || rep.DescribeSkipped {
				t.Errorf("Warm() = %+v, want 2 to 5 rounds, one slowest call each, the table described", rep)
			}
			if !isFake {
				return
			}
			for op, want := range map[string]int{"GetItem": 4 * rep.Rounds, "BatchGetItem": 4 * rep.Rounds, "UpdateItem": 8 * rep.Rounds, "DescribeTable": 1} {
				if got := f.Calls(op); got != want {
					t.Errorf("Calls(%s) = %d, want %d (4 connections × %d rounds, one description)", op, got, want, rep.Rounds)
				}
			}
			var warm int
			for _, item := range f.Items(table) {
				pk := item["PK"].(*types.AttributeValueMemberS).Value
				if strings.Contains(pk, "WARMUP") {
					warm++
					if !strings.HasPrefix(pk, "nteam-a/WARMUP#") {
						t.Errorf("warm-up item %q, want it under the namespace's prefix nteam-a/", pk)
					}
				}
			}
			if warm != 4 {
				t.Errorf("%d warm-up items, want 4 (one per connection)", warm)
			}
		})
	}
}

// TestWarmFails: what Warm says when it cannot finish, and what it
// tolerates.
func TestWarmFails(t *testing.T) {
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: dynamodb:DescribeTable"}
	refused := errors.New("dial tcp 127.0.0.1:8000: connect: connection refused")
	cases := []struct {
		name    string
		table   func(t *testing.T, f *dynamotest.Fake) string
		fail    func(ctx context.Context, op string) error
		want    error  // nil: Warm succeeds
		message string // in the error
		skipped bool
	}{
		{name: "DescribeTable denied", table: ratelimitTable, skipped: true,
			fail: func(_ context.Context, op string) error {
				if op == "DescribeTable" {
					return denied
				}
				return nil
			}},
		{name: "DynamoDB unreachable", table: ratelimitTable, want: dynamo.ErrUnavailable, message: "connection refused",
			fail: func(_ context.Context, op string) error {
				if op != "GetItem" {
					return refused
				}
				return nil
			}},
		{name: "writes throttled", table: ratelimitTable, want: dynamo.ErrThrottled, message: "warm-up: UpdateItem",
			fail: func(_ context.Context, op string) error {
				if op == "UpdateItem" {
					return &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
				}
				return nil
			}},
		{name: "another key schema", table: otherTable, want: dynamo.ErrSchema, message: "key schema [id HASH S], want [PK HASH S SK RANGE S]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := dynamotest.NewFake()
			table := c.table(t, f)
			s := newStoreCfg(t, f, dynamo.Config{Table: table, Timeout: 400 * time.Millisecond}, newClock())
			f.SetFail(c.fail)
			rep, err := warm.Run(context.Background(), s.Table(), warm.Options{Conns: 2})
			if c.want == nil {
				if err != nil || rep.DescribeSkipped != c.skipped {
					t.Errorf("Warm() = %+v, %v, want DescribeSkipped %v, nil", rep, err, c.skipped)
				}
				return
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.message) {
				t.Errorf("Warm() = %v, want an error wrapping %v that says %q", err, c.want, c.message)
			}
		})
	}
}

func ratelimitTable(t *testing.T, f *dynamotest.Fake) string {
	t.Helper()
	if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
		t.Fatalf("CreateTable(fake) = %v", err)
	}
	return "t"
}

// otherTable is a table keyed on "id" that holds this package's schema
// version record: made by something other than CreateTable.
func otherTable(t *testing.T, f *dynamotest.Fake) string {
	t.Helper()
	ctx := context.Background()
	_, err := f.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("other"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("other"), Item: map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: "_/SYSTEM#"}, "SK": &types.AttributeValueMemberS{Value: "#VERSION"},
		"schema": &types.AttributeValueMemberS{Value: dynamo.SchemaVersion},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return "other"
}
