package warm_test

import (
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/dynamotest/rig"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// The harness the rooms' tests share (internal/dynamotest/rig).
var (
	newClock    = rig.NewClock
	backends    = rig.Backends
	newStore    = rig.NewStore
	newStoreCfg = rig.NewStoreCfg
	fakeTable   = rig.FakeTable
	inBubble    = rig.InBubble
)

// pkOf is the partition key of an item key.
func pkOf(key map[string]types.AttributeValue) string {
	if v, ok := key["PK"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
