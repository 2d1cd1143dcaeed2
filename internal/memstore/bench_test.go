package memstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// benchLimit never runs dry during a benchmark, so every plan is admitted
// and written back.
var benchLimit = tokenbucket.Limit{Capacity: 1 << 50, RefillAmount: 1 << 40, RefillPeriod: time.Second}

func benchPlans(n int) []*cascade.Plan {
	ps := make([]*cascade.Plan, n)
	for i := range ps {
		ps[i] = &cascade.Plan{Debits: []cascade.Debit{{
			Key:    cascade.Key{Namespace: "default", Entity: "tenant-" + strconv.Itoa(i), Resource: "api"},
			Limit:  "rpm",
			Bucket: benchLimit,
			Amount: tokenbucket.PerToken,
		}}}
	}
	return ps
}

func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, s *Store, p *cascade.Plan) {
		if _, err := s.Acquire(ctx, p); err != nil {
			b.Fatalf("Acquire() error = %v", err)
		}
	}

	b.Run("hot_key", func(b *testing.B) {
		b.ReportAllocs()
		s, p := New(), benchPlans(1)[0]
		for b.Loop() {
			run(b, s, p)
		}
	})
	b.Run("distinct_keys_10k", func(b *testing.B) {
		b.ReportAllocs()
		s, ps := New(), benchPlans(10_000)
		for _, p := range ps {
			run(b, s, p)
		}
		i := 0
		for b.Loop() {
			run(b, s, ps[i%len(ps)])
			i++
		}
	})
	b.Run("two_descriptors", func(b *testing.B) {
		b.ReportAllocs()
		ps := benchPlans(2)
		p := &cascade.Plan{Debits: []cascade.Debit{ps[0].Debits[0], ps[1].Debits[0]}}
		s := New()
		for b.Loop() {
			run(b, s, p)
		}
	})
	b.Run("parallel_hot", func(b *testing.B) {
		b.ReportAllocs()
		s, p := New(), benchPlans(1)[0]
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				run(b, s, p)
			}
		})
	})
	b.Run("parallel_distinct", func(b *testing.B) {
		b.ReportAllocs()
		s, ps := New(), benchPlans(10_000)
		for _, p := range ps {
			run(b, s, p)
		}
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			for pb.Next() {
				run(b, s, ps[i%len(ps)])
				i++
			}
		})
	})
}
