package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// BenchmarkResolveWarm is what the stored limits' resolution adds to a
// decision on a key whose records are cached: no call, the lookups of
// its four scopes.
func BenchmarkResolveWarm(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	s := redisstore.New(c, redisstore.Config{Namespace: "ns", Timeout: time.Second})
	b.Cleanup(func() { _ = s.Close() })
	l, _ := tokenbucket.Rate(10, time.Second, 100)
	debits := []cascade.Debit{{Key: cascade.Key{Entity: "tenant", Resource: "r"}, Limit: "rps", Bucket: l, Amount: tokenbucket.PerToken, Op: cascade.Consume}}
	ctx := context.Background()
	if _, err := s.Resolve(ctx, debits); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Resolve(ctx, debits); err != nil {
			b.Fatal(err)
		}
	}
}
