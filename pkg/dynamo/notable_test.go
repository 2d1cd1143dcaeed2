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
