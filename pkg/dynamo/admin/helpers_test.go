package admin_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/dynamotest/rig"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// The harness the rooms' tests share (internal/dynamotest/rig).

var (
	newClock            = rig.NewClock
	backends            = rig.Backends
	fakeTable           = rig.FakeTable
	newStore            = rig.NewStore
	newStoreCfg         = rig.NewStoreCfg
	mustLimit           = rig.MustLimit
	serverError         = rig.ServerError
	transactionCanceled = rig.TransactionCanceled
	failOn              = rig.FailOn
	pkOf                = rig.PKOf
)

// slowLimit is a limit of capacity tokens that refills one millitoken a
// day: nothing to speak of in a test.
func slowLimit(t *testing.T, capacity tokenbucket.Millitokens) tokenbucket.Limit {
	t.Helper()
	l, err := tokenbucket.NewLimit(capacity*tokenbucket.PerToken, 1, 24*time.Hour)
	if err != nil {
		t.Fatalf("NewLimit() = %v", err)
	}
	return l
}

// bucketItems is every bucket item of f's table "t".
func bucketItems(f *dynamotest.Fake) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	for _, it := range f.Items("t") {
		if pk, _ := it["PK"].(*types.AttributeValueMemberS); pk != nil && strings.Contains(pk.Value, "/BUCKET#") {
			out = append(out, it)
		}
	}
	return out
}
