package memstore

import (
	"context"
	"slices"
	"strconv"
	"sync"
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

// BenchmarkAtCap measures decisions on existing keys while the table is at
// its bucket cap (every bucket holding less than full) and other goroutines
// keep asking for new keys as fast as they can, each of which passes at
// most 2·evictScan buckets and evicts one. It reports the existing keys'
// p50 and p99, and the new keys decided per second.
func BenchmarkAtCap(b *testing.B) {
	const (
		buckets  = 1 << 20
		inserter = 4
	)
	slowLimit := tokenbucket.Limit{Capacity: 1 << 40, RefillAmount: 1, RefillPeriod: time.Hour}
	s := New(WithMaxBuckets(buckets))
	ctx := context.Background()
	existing := make([]*cascade.Plan, 0, buckets)
	for i := 0; s.Stats().EvictedNotFull == 0; i++ { // until a shard is at its cap
		p := &cascade.Plan{Debits: []cascade.Debit{{
			Key:    cascade.Key{Namespace: "default", Entity: "old-" + strconv.Itoa(i), Resource: "api"},
			Limit:  "rpm",
			Bucket: slowLimit,
			Amount: tokenbucket.PerToken,
		}}}
		if _, err := s.Acquire(ctx, p); err != nil {
			b.Fatalf("Acquire() error = %v", err)
		}
		existing = append(existing, p)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var inserted atomic.Int64
	for w := range inserter {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := &cascade.Plan{Debits: []cascade.Debit{{
					Key:    cascade.Key{Namespace: "default", Entity: "new-" + strconv.Itoa(w) + "-" + strconv.Itoa(i), Resource: "api"},
					Limit:  "rpm",
					Bucket: slowLimit,
					Amount: tokenbucket.PerToken,
				}}}
				if _, err := s.Acquire(ctx, p); err == nil {
					inserted.Add(1)
				}
			}
		})
	}
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 1<<20)
	i := 0
	for b.Loop() {
		start := time.Now()
		if _, err := s.Acquire(ctx, existing[(i*7919)%len(existing)]); err != nil {
			b.Fatalf("Acquire(existing key) error = %v", err)
		}
		lat = append(lat, time.Since(start))
		i++
	}
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(len(existing)), "buckets")
	b.ReportMetric(float64(inserted.Load())/b.Elapsed().Seconds(), "new/s")
}

// floodRate is the new keys a second of BenchmarkFlood's flood: the rate
// of 20 callers sending a new key on every call to the binary (86,002
// calls in 4 s).
const floodRate = 20_000

// BenchmarkFlood measures a hot key's decisions in a store at its bound
// (65,536 buckets, each holding less than full), quiet and beside a steady
// flood of new keys (floodRate a second, paced in batches every 10 ms on
// one goroutine), each of which evicts a bucket. It reports
// the hot key's decisions/s, p50 and p99, and the flood's rate and
// evictions a second. Compare the two runs: the flood should cost the hot
// key nothing beyond the CPU the flood itself takes. allocs/op of the flood
// run include the flood's key strings.
func BenchmarkFlood(b *testing.B) {
	const buckets = 1 << 16
	hour := tokenbucket.Limit{Capacity: 1000, RefillAmount: 1000, RefillPeriod: time.Hour}
	key := func(prefix string, i int) *cascade.Plan {
		return &cascade.Plan{Debits: []cascade.Debit{{
			Key:    cascade.Key{Namespace: "default", Entity: prefix + strconv.Itoa(i), Resource: "api"},
			Limit:  "rph",
			Bucket: hour,
			Amount: tokenbucket.PerToken,
		}}}
	}
	for _, flood := range []bool{false, true} {
		name := "quiet"
		if flood {
			name = "flood"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s := New(WithMaxBuckets(buckets))
			for i := 0; s.Stats().EvictedNotFull == 0; i++ {
				if _, err := s.Acquire(ctx, key("old-", i)); err != nil {
					b.Fatalf("Acquire() error = %v", err)
				}
			}
			hot := benchPlans(1)[0]
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var sent atomic.Int64
			if flood {
				wg.Go(func() {
					t := time.NewTicker(10 * time.Millisecond)
					defer t.Stop()
					start, n := time.Now(), 0
					for {
						select {
						case <-stop:
							return
						case <-t.C:
						}
						// Catch up on ticks lost to scheduling: the rate holds.
						for want := int(time.Since(start).Seconds() * floodRate); n < want; n++ {
							if _, err := s.Acquire(ctx, key("new-", n)); err != nil {
								panic(err)
							}
						}
						sent.Store(int64(n))
					}
				})
			}
			evictedBefore := s.Stats().EvictedNotFull
			lat := make([]time.Duration, 0, 1<<20)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				if _, err := s.Acquire(ctx, hot); err != nil {
					b.Fatalf("Acquire(hot key) error = %v", err)
				}
				lat = append(lat, time.Since(start))
			}
			close(stop)
			wg.Wait()
			secs := b.Elapsed().Seconds()
			slices.Sort(lat)
			b.ReportMetric(float64(b.N)/secs, "decisions/s")
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(sent.Load())/secs, "new/s")
			b.ReportMetric(float64(s.Stats().EvictedNotFull-evictedBefore)/secs, "evictions/s")
		})
	}
}

// BenchmarkHugePlan decides plans of 15,000 and 60,000 debits, of one
// bucket (refused: the retry demands) and of as many distinct buckets: time
// per plan grows linearly with its size.
func BenchmarkHugePlan(b *testing.B) {
	for _, n := range []int{15_000, 60_000} {
		for _, distinct := range []bool{false, true} {
			name := strconv.Itoa(n) + "/one_bucket"
			if distinct {
				name = strconv.Itoa(n) + "/distinct"
			}
			b.Run(name, func(b *testing.B) {
				p := &cascade.Plan{}
				for i := range n {
					e := "one"
					if distinct {
						e = "e" + strconv.Itoa(i)
					}
					p.Debits = append(p.Debits, cascade.Debit{
						Key:    cascade.Key{Namespace: "default", Entity: e, Resource: "api"},
						Limit:  "rpm",
						Bucket: tokenbucket.Limit{Capacity: 3000, RefillAmount: 3000, RefillPeriod: time.Second},
						Amount: tokenbucket.PerToken,
					})
				}
				s := New()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Acquire(context.Background(), p); err != nil {
						b.Fatalf("Acquire() error = %v", err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/debit")
			})
		}
	}
}
