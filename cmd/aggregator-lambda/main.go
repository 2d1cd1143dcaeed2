package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

func main() {
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{})
	h := &handler{open: openStore(os.Getenv), log: logrus.NewEntry(log).WithField("component", "aggregator")}
	lambda.Start(h.Handle)
}

// handler is the function: it opens its writer on the first invocation
// and keeps it for the next ones (a Lambda execution environment serves
// one invocation at a time, but Handle is safe for concurrent use).
type handler struct {
	open func(ctx context.Context) (usage.Writer, error)
	log  *logrus.Entry

	mu  sync.Mutex
	agg *usage.Aggregator
}

// openStore returns a function opening the DynamoDB store the settings
// name.
func openStore(getenv func(string) string) func(ctx context.Context) (usage.Writer, error) {
	return func(ctx context.Context) (usage.Writer, error) {
		s, err := config.FromEnv(getenv)
		if err != nil {
			return nil, err
		}
		client, err := dynamo.NewClient(ctx, s.DynamoDBEndpoint, s.AWSRegion)
		if err != nil {
			return nil, err
		}
		st, err := dynamo.NewStore(ctx, client, s.DynamoConfig())
		if err != nil {
			return nil, err
		}
		return usage.Of(st), nil
	}
}

// aggregator returns the handler's aggregator, opening its writer if no
// invocation has yet.
func (h *handler) aggregator(ctx context.Context) (*usage.Aggregator, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.agg == nil {
		w, err := h.open(ctx)
		if err != nil {
			return nil, fmt.Errorf("aggregator-lambda: open the table: %w", err)
		}
		h.agg = usage.NewAggregator(w)
	}
	return h.agg, nil
}

// Handle processes one batch of stream records and reports the ones not
// applied. It fails as a whole (Lambda retries the batch) only when it
// cannot start.
func (h *handler) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	agg, err := h.aggregator(ctx)
	if err != nil {
		return events.DynamoDBEventResponse{}, err
	}
	recs := make([]usage.Record, len(ev.Records))
	seq := make(map[string]string, len(ev.Records))
	for i, r := range ev.Records {
		recs[i] = record(r)
		seq[r.EventID] = r.Change.SequenceNumber
	}
	failed, err := agg.Process(ctx, recs)
	resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
	for _, id := range failed {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: seq[id]})
	}
	entry := h.log.WithField("records", len(recs)).WithField("failed", len(failed))
	if err != nil {
		entry.WithError(err).Warn("records not applied: reported for retry")
	} else {
		entry.Debug("batch applied")
	}
	return resp, nil
}
