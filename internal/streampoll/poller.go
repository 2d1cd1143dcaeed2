package streampoll

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/sirupsen/logrus"
)

// Defaults of Config's zero fields.
const (
	DefaultIdle     = 250 * time.Millisecond
	DefaultLease    = 15 * time.Second
	DefaultBatch    = 1000
	maxBackoff      = 5 * time.Second
	describeEvery   = 10 * time.Second
	waitForTheLease = 2 * time.Second
)

// Streams is the part of the DynamoDB Streams API the poller calls.
type Streams interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

var _ Streams = (*dynamodbstreams.Client)(nil)

// Checkpoints keeps the poller's place and lease: the DynamoDB store.
type Checkpoints interface {
	StreamCheckpoint(ctx context.Context, shard string) (usage.Checkpoint, error)
	SetStreamCheckpoint(ctx context.Context, owner, shard string, cp usage.Checkpoint) error
	StreamLease(ctx context.Context, owner string, ttl time.Duration) (bool, error)
}

// Processor applies records, each at most once however often it is
// delivered: the aggregator. failed names the records not applied.
type Processor interface {
	Process(ctx context.Context, recs []usage.Record) (failed []string, err error)
}

// Observer hears of the poller's progress. Implementations must be safe
// for concurrent use and must not block.
type Observer interface {
	// Read is called after each GetRecords with how many records it
	// returned and the age of the newest (zero when none).
	Read(records int, age time.Duration)
	// Checkpointed is called after each checkpoint with the age of the
	// record it names: how far the applied records lag the stream.
	Checkpointed(lag time.Duration)
	// Leading is called with whether this poller holds the lease.
	Leading(held bool)
}

// Config configures a Poller.
type Config struct {
	// StreamARN is the table's stream (DescribeTable's LatestStreamArn).
	StreamARN string
	// Owner names this poller in the lease; random when empty.
	Owner string
	// Idle is the wait after a round that read nothing (DefaultIdle).
	Idle time.Duration
	// Lease is the lease's lifetime, renewed every round (DefaultLease).
	Lease time.Duration
	// Batch is the most records one GetRecords returns (DefaultBatch).
	Batch int32
	// Log logs the poller's events.
	Log *logrus.Entry
	// Observer hears of its progress (none when nil).
	Observer Observer
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Poller reads the table's stream into a Processor. Build it with New.
type Poller struct {
	streams Streams
	cps     Checkpoints
	proc    Processor
	cfg     Config

	shards    []st.Shard
	described time.Time
	iters     map[string]*string // shard → next iterator (nil: start from its checkpoint)
	closed    map[string]bool    // shards read to their end
	failures  int
}

// New returns a poller of cfg.StreamARN.
func New(streams Streams, cps Checkpoints, proc Processor, cfg Config) *Poller {
	if cfg.Owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Owner = "poller-" + hex.EncodeToString(b[:])
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Poller{streams: streams, cps: cps, proc: proc, cfg: cfg, iters: map[string]*string{}, closed: map[string]bool{}}
}

type nopObserver struct{}

func (nopObserver) Read(int, time.Duration)    {}
func (nopObserver) Checkpointed(time.Duration) {}
func (nopObserver) Leading(bool)               {}

// Owner is the name this poller holds the lease by.
func (p *Poller) Owner() string { return p.cfg.Owner }

// Run polls until ctx ends, then returns nil; it stops between batches, so
// that what was applied is checkpointed.
func (p *Poller) Run(ctx context.Context) error {
	leading := false
	for ctx.Err() == nil {
		held, err := p.cps.StreamLease(ctx, p.cfg.Owner, p.cfg.Lease)
		if err != nil || !held {
			if err != nil && ctx.Err() == nil {
				p.cfg.Log.WithError(err).Warn("aggregator: taking the stream lease failed; retrying")
			}
			if leading {
				p.cfg.Log.Info("aggregator: lost the stream lease; another poller reads the stream")
			}
			leading = false
			p.cfg.Observer.Leading(false)
			p.iters = map[string]*string{} // the holder moves the checkpoints meanwhile
			sleep(ctx, waitForTheLease)
			continue
		}
		if !leading {
			p.cfg.Log.WithField("owner", p.cfg.Owner).Info("aggregator: holding the stream lease; reading the stream")
			leading = true
			p.cfg.Observer.Leading(true)
		}
		n, err := p.round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			p.failures++
			wait := min(p.cfg.Idle<<min(p.failures, 6), maxBackoff)
			p.cfg.Log.WithError(err).WithField("retry_in", wait.String()).Warn("aggregator: a round failed; reading again from the checkpoints")
			p.iters = map[string]*string{}
			sleep(ctx, wait)
		case n == 0:
			p.failures = 0
			sleep(ctx, p.cfg.Idle)
		default:
			p.failures = 0
		}
	}
	return nil
}

// round reads one batch from every shard that is due, and returns how many
// records it applied.
func (p *Poller) round(ctx context.Context) (int, error) {
	if err := p.describe(ctx); err != nil {
		return 0, err
	}
	total := 0
	for _, sh := range p.shards {
		id := aws.ToString(sh.ShardId)
		if p.closed[id] || !p.parentDone(sh) {
			continue
		}
		n, err := p.shard(ctx, id)
		if err != nil {
			return total, fmt.Errorf("shard %s: %w", id, err)
		}
		total += n
		if ctx.Err() != nil {
			break
		}
	}
	return total, nil
}

// parentDone reports whether sh's parent, when the stream still has it,
// has been read to its end: a child's records come after its parent's.
func (p *Poller) parentDone(sh st.Shard) bool {
	parent := aws.ToString(sh.ParentShardId)
	if parent == "" || p.closed[parent] {
		return true
	}
	for _, o := range p.shards {
		if aws.ToString(o.ShardId) == parent {
			return false
		}
	}
	return true // trimmed from the stream: nothing left to read
}

// describe lists the stream's shards, at most every describeEvery.
func (p *Poller) describe(ctx context.Context) error {
	if p.shards != nil && p.cfg.Now().Sub(p.described) < describeEvery {
		return nil
	}
	var shards []st.Shard
	var start *string
	for {
		out, err := p.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(p.cfg.StreamARN), ExclusiveStartShardId: start})
		if err != nil {
			return fmt.Errorf("describe stream: %w", err)
		}
		if out.StreamDescription == nil {
			return errors.New("describe stream: no description")
		}
		shards = append(shards, out.StreamDescription.Shards...)
		start = out.StreamDescription.LastEvaluatedShardId
		if start == nil {
			break
		}
	}
	p.shards, p.described = shards, p.cfg.Now()
	return nil
}

// shard reads one batch of a shard, applies it and checkpoints it.
func (p *Poller) shard(ctx context.Context, id string) (int, error) {
	iter, err := p.iterator(ctx, id)
	if err != nil || iter == nil {
		return 0, err
	}
	out, err := p.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(p.cfg.Batch)})
	if err != nil {
		var expired *st.ExpiredIteratorException
		if errors.As(err, &expired) {
			delete(p.iters, id)
			return 0, nil
		}
		return 0, fmt.Errorf("get records: %w", err)
	}
	recs := make([]usage.Record, len(out.Records))
	for i, r := range out.Records {
		recs[i] = record(r)
	}
	var age time.Duration
	if n := len(recs); n > 0 {
		age = p.cfg.Now().Sub(recs[n-1].At)
	}
	p.cfg.Observer.Read(len(recs), age)
	if len(recs) > 0 {
		if err := p.apply(ctx, id, recs); err != nil {
			return 0, err
		}
	}
	if out.NextShardIterator == nil {
		// Closed, and read to its end.
		last, _ := p.cps.StreamCheckpoint(ctx, id)
		last.Closed = true
		if err := p.cps.SetStreamCheckpoint(ctx, p.cfg.Owner, id, last); err != nil {
			return len(recs), err
		}
		p.closed[id] = true
		delete(p.iters, id)
		return len(recs), nil
	}
	p.iters[id] = out.NextShardIterator
	return len(recs), nil
}

// apply hands recs to the processor and checkpoints the last one. When
// some failed, the checkpoint moves to the record before the first that
// failed, and the shard is read again from there.
func (p *Poller) apply(ctx context.Context, id string, recs []usage.Record) error {
	failed, err := p.proc.Process(ctx, recs)
	upTo := len(recs)
	if err != nil {
		upTo = 0
	} else if len(failed) > 0 {
		bad := make(map[string]bool, len(failed))
		for _, f := range failed {
			bad[f] = true
		}
		for i, r := range recs {
			if bad[r.ID] {
				upTo = i
				break
			}
		}
	}
	if upTo > 0 {
		last := recs[upTo-1]
		if cerr := p.cps.SetStreamCheckpoint(ctx, p.cfg.Owner, id, usage.Checkpoint{Sequence: last.Sequence}); cerr != nil {
			return cerr
		}
		p.cfg.Observer.Checkpointed(p.cfg.Now().Sub(last.At))
	}
	if upTo < len(recs) {
		delete(p.iters, id) // read again from the checkpoint
		if err == nil {
			err = fmt.Errorf("%d of %d records not applied", len(recs)-upTo, len(recs))
		}
		return fmt.Errorf("aggregator: %w", err)
	}
	return nil
}

// iterator returns the shard's next iterator: the one the last read
// returned, or one after its checkpoint (from the shard's start when it has
// none). nil for a shard checkpointed closed.
func (p *Poller) iterator(ctx context.Context, id string) (*string, error) {
	if it, ok := p.iters[id]; ok {
		return it, nil
	}
	cp, err := p.cps.StreamCheckpoint(ctx, id)
	if err != nil {
		return nil, err
	}
	if cp.Closed {
		p.closed[id] = true
		return nil, nil
	}
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(p.cfg.StreamARN), ShardId: aws.String(id), ShardIteratorType: st.ShardIteratorTypeTrimHorizon}
	if cp.Sequence != "" {
		in.ShardIteratorType, in.SequenceNumber = st.ShardIteratorTypeAfterSequenceNumber, aws.String(cp.Sequence)
	}
	out, err := p.streams.GetShardIterator(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("shard iterator: %w", err)
	}
	p.iters[id] = out.ShardIterator
	return out.ShardIterator, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
