package warm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
	"github.com/dynalimit/dynalimit/pkg/dynamo/warm"
)

// warmScript makes every call on a warm-up item take pause, and can apply a
// write whose condition fails (a DynamoDB that ignored it).
type warmScript struct {
	dynamo.API
	pause      time.Duration
	ignoreCond bool
}

func (w *warmScript) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	time.Sleep(w.pause)
	return w.API.GetItem(ctx, in, o...)
}

func (w *warmScript) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	time.Sleep(w.pause)
	return w.API.BatchGetItem(ctx, in, o...)
}

func (w *warmScript) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	time.Sleep(w.pause)
	if w.ignoreCond && strings.Contains(pkOf(in.Key), "WARMUP") && strings.Contains(*in.ConditionExpression, "<") {
		cp := *in
		cp.ConditionExpression = nil
		return w.API.UpdateItem(ctx, &cp, o...)
	}
	return w.API.UpdateItem(ctx, in, o...)
}

// TestWarmRounds pins when Warm stops: after 2 rounds once the slowest call
// of a round is within Timeout/2 (here 10 ms) and 25 ms, at that bound
// too, and after 5 at most. The default is 8 connections, and each round is
// logged with its slowest call in milliseconds.
func TestWarmRounds(t *testing.T) {
	for _, c := range []struct {
		pause  time.Duration
		rounds int
	}{{0, 2}, {10 * time.Millisecond, 2}, {15 * time.Millisecond, 5}} {
		t.Run(c.pause.String(), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				f := dynamotest.NewFake()
				if err := admin.CreateTable(context.Background(), f, "t"); err != nil {
					t.Fatal(err)
				}
				log, hook := logtest.NewNullLogger()
				log.SetLevel(logrus.DebugLevel)
				s := newStoreCfg(t, &warmScript{API: f, pause: c.pause}, dynamo.Config{Table: "t", Timeout: 20 * time.Millisecond}, newClock(), dynamo.WithLogger(logrus.NewEntry(log)))
				f.ResetCalls()
				rep, err := warm.Run(context.Background(), s.Table(), warm.Options{})
				if err != nil || rep.Rounds != c.rounds {
					t.Fatalf("Warm() = %+v, %v, want %d rounds", rep, err, c.rounds)
				}
				if got, want := f.Calls("GetItem"), warm.DefaultConns*c.rounds; got != want {
					t.Errorf("GetItem calls = %d, want %d (DefaultConns × rounds)", got, want)
				}
				var logged []any
				for _, e := range hook.AllEntries() {
					if e.Message == "warm-up round" {
						logged = append(logged, e.Data["slowest_ms"])
					}
				}
				if len(logged) != c.rounds || logged[0] != float64(c.pause.Microseconds())/1000 {
					t.Errorf("logged rounds %v, want %d, each %v ms", logged, c.rounds, float64(c.pause.Microseconds())/1000)
				}
			})
		})
	}
}

// TestWarmFailsOnIgnoredCondition: a table that applies a write whose
// condition cannot hold is not one to decide on.
func TestWarmFailsOnIgnoredCondition(t *testing.T) {
	s := newStore(t, &warmScript{API: fakeTable(t), ignoreCond: true}, "t", newClock())
	if _, err := warm.Run(context.Background(), s.Table(), warm.Options{Conns: 1}); !errors.Is(err, dynamo.ErrUnavailable) {
		t.Errorf("Warm() on a table that ignores conditions = %v, want ErrUnavailable", err)
	}
}
