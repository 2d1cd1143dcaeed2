package admintest_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/admintest"
	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// TestEmbedded runs the suite on the embedded store: buckets only, the
// other jobs answering that it does not keep them.
func TestEmbedded(t *testing.T) {
	admintest.Run(t, func(t *testing.T, ns string) admintest.Store {
		st := memstore.New(memstore.WithNamespace(ns))
		log, _ := test.NewNullLogger()
		return admintest.Store{
			Stores:     admin.Embedded(st, ns, logrus.NewEntry(log)),
			Implements: []admin.Job{admin.JobBuckets},
			Acquire:    st.Acquire,
		}
	})
}

// TestDynamoDB runs the suite on DynamoDB Local, every job, on one table:
// a store without a principal, as the serving process's, each write
// through a store of the call's principal on the same client.
func TestDynamoDB(t *testing.T) {
	l := dynamotest.Shared(t)
	table := dynamotest.TableName(t)
	l.CreateTable(context.Background(), t, table)
	client := l.Client(t)
	cfg := dynamo.Config{Table: table, Namespace: "suite", Timeout: 5 * time.Second}
	base, err := dynamo.NewStore(context.Background(), client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	var ids atomic.Int64
	admintest.Run(t, func(t *testing.T, ns string) admintest.Store {
		d := admin.NewDynamo(func(context.Context) (*dynamo.Store, error) { return base, nil }, "", func(ctx context.Context, p string) (*dynamo.Store, error) {
			return dynamo.NewStore(ctx, client, cfg, dynamo.WithPrincipal(p))
		})
		t.Cleanup(func() { _ = d.Close() })
		return admintest.Store{
			Stores:     d.Stores(),
			Implements: admin.Jobs,
			Acquire:    base.Acquire,
			AddUsage: func(ctx context.Context, ns, entity, resource, limit string, at time.Time, mt int64) error {
				rec := usage.Entry{ID: fmt.Sprint("suite-", ids.Add(1)), At: at, Usage: []usage.Usage{{Namespace: ns, Entity: entity, Resource: resource, Limit: limit, Millitokens: mt}}}
				_, err := usage.Of(base).ApplyUsage(ctx, []usage.Entry{rec})
				return err
			},
		}
	})
}
