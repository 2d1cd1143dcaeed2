package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// BenchmarkAcquire decides one-descriptor plans on a redis-server from 64
// goroutines, on one hot key and on 10,000 keys, with and without the
// usage history, and reports Redis's own CPU per decision (used_cpu_sys
// and used_cpu_user of INFO cpu) beside ns/op.
//
//	go test -run '^$' -bench Acquire -benchtime 20000x ./internal/redisstore
func BenchmarkAcquire(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c := client(b, srv)
	l, _ := tokenbucket.Rate(1_000_000_000, time.Second, 0)
	for _, keys := range []int{1, 10_000} {
		for _, usage := range []time.Duration{0, time.Hour} {
			b.Run(fmt.Sprintf("keys=%d/usage=%v", keys, usage > 0), func(b *testing.B) {
				s := redisstore.New(c, redisstore.Config{Timeout: time.Second, UsageRetention: usage})
				defer s.Close()
				plans := make([]*cascade.Plan, keys)
				for i := range plans {
					plans[i] = &cascade.Plan{Debits: []cascade.Debit{{Key: cascade.Key{Entity: "e" + strconv.Itoa(i), Resource: "api"}, Limit: "l", Bucket: l, Amount: tokenbucket.PerToken}}}
				}
				cpu := redisCPU(b, srv)
				b.SetParallelism(32)
				b.ResetTimer()
				var n atomicCounter
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.next()
						if _, err := s.Acquire(context.Background(), plans[i%len(plans)]); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric((redisCPU(b, srv)-cpu)*1e6/float64(b.N), "redis-µs/op")
			})
		}
	}
}

type atomicCounter struct{ v atomic.Int64 }

func (c *atomicCounter) next() int { return int(c.v.Add(1)) }

// client is a client of srv for tb.
func client(tb testing.TB, srv *redistest.Server) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		tb.Fatalf("client: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// redisCPU is the CPU redis-server has used, in seconds.
func redisCPU(tb testing.TB, srv *redistest.Server) float64 {
	tb.Helper()
	info := srv.Info("cpu")
	sys, _ := strconv.ParseFloat(info["used_cpu_sys"], 64)
	user, _ := strconv.ParseFloat(info["used_cpu_user"], 64)
	return sys + user
}
