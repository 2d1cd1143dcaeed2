package warm_test

import (
	"os"
	"testing"

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
	pkOf        = rig.PKOf
	inBubble    = rig.InBubble
)
