package dynamotest

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// bucket is one partition's tokens of one kind (reads or writes), as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// partition names the partition of key in table: its partition key.
func partition(table *string, key map[string]types.AttributeValue) string {
	return aws.ToString(table) + "\x00" + sval(key["PK"])
}

// readUnits is what reading item costs: one unit a started 4 KB (at least
// one), half that when eventually consistent.
func readUnits(item map[string]types.AttributeValue, consistent bool) float64 {
	u := float64(max(1, (ItemSize(item)+4095)/4096))
	if !consistent {
		u /= 2
	}
	return u
}

// take takes units (partition → units) of kind k from the partitions'
// buckets, all or none, under f's lock: it returns the partitions short of
// their units (and takes nothing), or nil. Without Options.Throughput of
// kind k it takes nothing from a bucket and returns nil. Units taken are
// billed (Consumed); a call short of them counts a throttle.
func (f *Fake) take(k callKind, units map[string]float64) map[string]bool {
	var short map[string]bool
	if f.model.Partitions != nil {
		short = f.takeHashed(k, units)
	} else {
		short = f.takeKeyed(k, units)
	}
	if short != nil {
		f.used.Throttled++
		return short
	}
	for _, u := range units {
		if k == writeCall {
			f.used.WriteUnits += u
		} else {
			f.used.ReadUnits += u
		}
	}
	return nil
}

// takeKeyed is take with a partition per partition key.
func (f *Fake) takeKeyed(k callKind, units map[string]float64) map[string]bool {
	rate := f.model.Throughput.ReadUnits
	if k == writeCall {
		rate = f.model.Throughput.WriteUnits
	}
	if rate <= 0 {
		return nil
	}
	now := time.Now()
	var short map[string]bool
	for p, u := range units {
		b := f.bucket(k, p, rate, now)
		if b.tokens < u {
			if short == nil {
				short = map[string]bool{}
			}
			short[p] = true
		}
	}
	if short != nil {
		return short
	}
	for p, u := range units {
		f.bucket(k, p, rate, now).tokens -= u
	}
	return nil
}

// bucket returns partition p's bucket of kind k, filled up to now at rate
// (at most one second's worth).
func (f *Fake) bucket(k callKind, p string, rate float64, now time.Time) *bucket {
	name := p + "\x00r"
	if k == writeCall {
		name = p + "\x00w"
	}
	b := f.buckets[name]
	if b == nil {
		b = &bucket{tokens: rate, at: now}
		f.buckets[name] = b
	}
	if now.After(b.at) {
		b.tokens = min(rate, b.tokens+rate*now.Sub(b.at).Seconds())
		b.at = now
	}
	return b
}

// takeOne takes units of kind k from the partition of key in table, under
// f's lock, or returns the ThrottlingException DynamoDB answers a partition
// past its throughput with.
func (f *Fake) takeOne(k callKind, table *string, key map[string]types.AttributeValue, units float64) error {
	if f.take(k, map[string]float64{partition(table, key): units}) == nil {
		return nil
	}
	reason := "TableReadKeyRangeThroughputExceeded"
	if k == writeCall {
		reason = "TableWriteKeyRangeThroughputExceeded"
	}
	return &types.ThrottlingException{
		Message:           aws.String("Throughput exceeds the current capacity for one or more partitions of your table"),
		ThrottlingReasons: []types.ThrottlingReason{{Reason: aws.String(reason), Resource: aws.String("arn:aws:dynamodb:us-east-1:000000000000:table/" + aws.ToString(table))}},
	}
}

// Capacity is what a Fake billed: the write and read units of every call
// that took effect (a failed condition included, as DynamoDB bills it),
// and the calls (a batch's keys each) throttled.
type Capacity struct {
	WriteUnits, ReadUnits float64
	Throttled             int
	// Unanswered counts writes that took effect and whose caller stopped
	// waiting before the answer came (its context ended): what the
	// write took, the caller never learned it had.
	Unanswered int
}

// Consumed returns what f billed since it was made or ResetConsumed.
func (f *Fake) Consumed() Capacity {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used
}

// ResetConsumed zeroes what Consumed returns.
func (f *Fake) ResetConsumed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.used = Capacity{}
}
