package dynamo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// TestMissingTableIsErrNoTable: a table that does not exist is classified
// once as ErrNoTable, which is still ErrUnavailable to a decision; on the
// fake and on DynamoDB Local (whose ResourceNotFoundException the SDK
// decodes).
func TestMissingTableIsErrNoTable(t *testing.T) {
	ctx := context.Background()
	apis := []struct {
		name string
		api  func(t *testing.T) dynamo.API
	}{
		{"fake", func(*testing.T) dynamo.API { return dynamotest.NewFake() }},
		{"local", func(t *testing.T) dynamo.API { return dynamotest.Shared(t).Client(t) }},
	}
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			_, err := dynamo.NewStore(ctx, a.api(t), dynamo.Config{Table: dynamotest.TableName(t) + "-missing"})
			if !errors.Is(err, dynamo.ErrNoTable) || !errors.Is(err, dynamo.ErrUnavailable) {
				t.Errorf("NewStore(missing table) = %v, want ErrNoTable and ErrUnavailable", err)
			}
		})
	}
	if errors.Is(dynamo.ErrUnavailable, dynamo.ErrNoTable) {
		t.Error("ErrUnavailable is ErrNoTable, want only the converse")
	}
}

// TestNoCredentialsIsErrNoCredentials: the SDK's signing failure (it has no
// error type, only its text) is classified as ErrNoCredentials, still
// ErrUnavailable to a decision.
func TestNoCredentialsIsErrNoCredentials(t *testing.T) {
	f := dynamotest.NewFake()
	f.SetFail(func(context.Context, string) error {
		return errors.New("operation error DynamoDB: GetItem, get identity: get credentials: failed to refresh cached credentials, no EC2 IMDS role found")
	})
	_, err := dynamo.NewStore(context.Background(), f, dynamo.Config{Table: "t"})
	if !errors.Is(err, dynamo.ErrNoCredentials) || !errors.Is(err, dynamo.ErrUnavailable) || errors.Is(err, dynamo.ErrNoTable) {
		t.Errorf("NewStore(no credentials) = %v, want ErrNoCredentials and ErrUnavailable only", err)
	}
}
