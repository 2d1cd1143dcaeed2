package streampoll

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
	"github.com/sirupsen/logrus"
)

// fakeStream is a stream of shards, each a list of records; an iterator is
// "shard/position". A shard is closed when closed says so.
type fakeStream struct {
	mu     sync.Mutex
	shards []st.Shard
	recs   map[string][]st.Record
	closed map[string]bool
}

func (f *fakeStream) add(shard, parent string, n int, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := st.Shard{ShardId: aws.String(shard)}
	if parent != "" {
		sh.ParentShardId = aws.String(parent)
	}
	f.shards = append(f.shards, sh)
	for i := range n {
		seq := strconv.Itoa(len(f.recs[shard]) + 1)
		id := shard + "-" + strconv.Itoa(i)
		f.recs[shard] = append(f.recs[shard], st.Record{EventID: aws.String(id), EventName: st.OperationTypeModify,
			Dynamodb: &st.StreamRecord{SequenceNumber: aws.String(seq), ApproximateCreationDateTime: aws.Time(time.Now())}})
	}
	f.closed[shard] = closed
}

func (f *fakeStream) DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &st.StreamDescription{Shards: append([]st.Shard(nil), f.shards...)}}, nil
}

func (f *fakeStream) GetShardIterator(_ context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	pos := 0
	if in.ShardIteratorType == st.ShardIteratorTypeAfterSequenceNumber {
		pos, _ = strconv.Atoi(aws.ToString(in.SequenceNumber))
	}
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(aws.ToString(in.ShardId) + "/" + strconv.Itoa(pos))}, nil
}

func (f *fakeStream) GetRecords(_ context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	it := aws.ToString(in.ShardIterator)
	var shard string
	var pos int
	for i := len(it) - 1; i >= 0; i-- {
		if it[i] == '/' {
			shard = it[:i]
			pos, _ = strconv.Atoi(it[i+1:])
			break
		}
	}
	all := f.recs[shard]
	end := min(pos+int(aws.ToInt32(in.Limit)), len(all))
	out := &dynamodbstreams.GetRecordsOutput{Records: all[pos:end]}
	if end < len(all) || !f.closed[shard] {
		out.NextShardIterator = aws.String(shard + "/" + strconv.Itoa(end))
	}
	return out, nil
}

// fakeCheckpoints keeps checkpoints in memory; the lease is free.
type fakeCheckpoints struct {
	mu  sync.Mutex
	cps map[string]usage.Checkpoint
}

func (f *fakeCheckpoints) StreamCheckpoint(_ context.Context, shard string) (usage.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cps[shard], nil
}

func (f *fakeCheckpoints) SetStreamCheckpoint(_ context.Context, _, shard string, cp usage.Checkpoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cps[shard] = cp
	return nil
}

func (f *fakeCheckpoints) StreamLease(context.Context, string, time.Duration) (bool, error) {
	return true, nil
}

// counter applies records, counting each id; fail, when set, fails the
// ids it names once.
type counter struct {
	mu    sync.Mutex
	seen  map[string]int
	order []string
	fail  map[string]bool
}

func (c *counter) Process(_ context.Context, recs []usage.Record) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var failed []string
	for _, r := range recs {
		if c.fail[r.ID] {
			delete(c.fail, r.ID)
			failed = append(failed, r.ID)
			continue
		}
		if c.seen[r.ID] == 0 {
			c.order = append(c.order, r.ID)
		}
		c.seen[r.ID]++ // the aggregator would skip a second delivery
	}
	return failed, nil
}

func (c *counter) count() (distinct int, order []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), append([]string(nil), c.order...)
}

func run(t *testing.T, p *Poller, until func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for !until() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

func quiet() *logrus.Entry {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	return logrus.NewEntry(l)
}

// TestPollerParentsFirstAndCheckpoints: every record of every shard is
// applied, a parent's before its child's; closed shards are checkpointed
// closed; a failed record is read again and applied, and nothing before it
// twice; a new poller resumes from the checkpoints.
func TestPollerParentsFirstAndCheckpoints(t *testing.T) {
	s := &fakeStream{recs: map[string][]st.Record{}, closed: map[string]bool{}}
	s.add("child", "parent", 30, false) // listed first: must still wait
	s.add("parent", "", 25, true)
	cps := &fakeCheckpoints{cps: map[string]usage.Checkpoint{}}
	c := &counter{seen: map[string]int{}, fail: map[string]bool{"parent-7": true}}
	p := New(s, cps, c, Config{StreamARN: "arn", Batch: 10, Idle: time.Millisecond, Log: quiet()})
	run(t, p, func() bool { n, _ := c.count(); return n == 55 })
	n, order := c.count()
	if n != 55 {
		t.Fatalf("%d records applied, want 55", n)
	}
	for i, id := range order[:25] {
		if id[:6] != "parent" {
			t.Fatalf("record %d applied was %s: want every parent record before the child's", i, id)
		}
	}
	c.mu.Lock()
	for id, k := range c.seen {
		if k > 1 && id != "parent-7" && !after(id, "parent-7") {
			t.Errorf("%s applied %d times: only records after the failed one are read again", id, k)
		}
	}
	c.mu.Unlock()
	if cp := cps.cps["parent"]; !cp.Closed || cp.Sequence != "25" {
		t.Errorf("parent's checkpoint %+v, want closed at 25", cp)
	}
	if cp := cps.cps["child"]; cp.Closed || cp.Sequence != "30" {
		t.Errorf("child's checkpoint %+v, want open at 30", cp)
	}
	// More records; a new poller resumes from the checkpoints.
	s.add("child2", "", 0, false)
	s.mu.Lock()
	for i := range 5 {
		s.recs["child"] = append(s.recs["child"], st.Record{EventID: aws.String("late-" + strconv.Itoa(i)),
			Dynamodb: &st.StreamRecord{SequenceNumber: aws.String(strconv.Itoa(31 + i))}})
	}
	s.mu.Unlock()
	c2 := &counter{seen: map[string]int{}}
	run(t, New(s, cps, c2, Config{StreamARN: "arn", Idle: time.Millisecond, Log: quiet()}), func() bool { n, _ := c2.count(); return n == 5 })
	if n, order := c2.count(); n != 5 || order[0] != "late-0" {
		t.Errorf("the second poller applied %d (%v), want the 5 new records only", n, order)
	}
}

// after reports whether record id comes after ref in the same shard.
func after(id, ref string) bool {
	a, _ := strconv.Atoi(id[len("parent-"):])
	b, _ := strconv.Atoi(ref[len("parent-"):])
	return len(id) > 7 && id[:7] == "parent-" && a > b
}

// failing is a processor that always fails.
type failing struct{}

func (failing) Process(context.Context, []usage.Record) ([]string, error) {
	return nil, errors.New("down")
}

// TestPollerFailureKeepsCheckpoint: a processor that fails moves no
// checkpoint.
func TestPollerFailureKeepsCheckpoint(t *testing.T) {
	s := &fakeStream{recs: map[string][]st.Record{}, closed: map[string]bool{}}
	s.add("a", "", 3, false)
	cps := &fakeCheckpoints{cps: map[string]usage.Checkpoint{}}
	start := time.Now()
	run(t, New(s, cps, failing{}, Config{StreamARN: "arn", Idle: time.Millisecond, Log: quiet()}), func() bool { return time.Since(start) > 100*time.Millisecond })
	if cp := cps.cps["a"]; cp.Sequence != "" {
		t.Errorf("checkpoint %+v after failures, want none", cp)
	}
}
