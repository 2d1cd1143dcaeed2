package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/internal/storetest"
)

// server starts a redis-server for t (internal/redistest) and returns a
// client of it.
func server(t testing.TB) rueidis.Client {
	t.Helper()
	c, _ := serverProc(t)
	return c
}

// serverProc is server, with the server itself.
func serverProc(t testing.TB) (rueidis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	return client(t, srv), srv
}

// fresh returns a store on c at clock, after flush empties Redis.
func fresh(t *testing.T, c rueidis.Client, clock *storetest.Clock, flush func()) *redisstore.Store {
	t.Helper()
	flush()
	s := redisstore.New(c, redisstore.Config{Now: clock.Now, Timeout: time.Second})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// flushAll empties the Redis c talks to (one server).
func flushAll(t *testing.T, c rueidis.Client) func() {
	return func() {
		if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// replicas returns n stores on c, as n replicas of the service, in a
// namespace of t's own.
func replicas(t *testing.T, c rueidis.Client, n int) []*redisstore.Store {
	t.Helper()
	out := make([]*redisstore.Store, n)
	for i := range out {
		out[i] = redisstore.New(c, redisstore.Config{Namespace: t.Name(), Timeout: time.Second})
		s := out[i]
		t.Cleanup(func() { _ = s.Close() })
	}
	return out
}

func TestConformance(t *testing.T) {
	c := server(t)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) storetest.Store {
		return fresh(t, c, clock, flushAll(t, c))
	}, storetest.WithMaxCalls(60_001)) // a call is about 0.1 ms here
}

func TestSettleConformance(t *testing.T) {
	c := server(t)
	storetest.RunSettle(t, func(t *testing.T, clock *storetest.Clock) storetest.Settler {
		return fresh(t, c, clock, flushAll(t, c))
	})
}

func TestConcurrency(t *testing.T) {
	c := server(t)
	storetest.RunConcurrency(t, func(t *testing.T) []storetest.Store {
		var out []storetest.Store
		for _, s := range replicas(t, c, 3) {
			out = append(out, s)
		}
		return out
	})
}

func TestSettleConcurrency(t *testing.T) {
	c := server(t)
	storetest.RunSettleConcurrency(t, func(t *testing.T) []storetest.Settler {
		var out []storetest.Settler
		for _, s := range replicas(t, c, 3) {
			out = append(out, s)
		}
		return out
	})
}

// cluster starts a cluster of three masters for t and returns a client of
// it, and a function that empties it.
func cluster(t *testing.T) (rueidis.Client, func()) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 0, redistest.Options{})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Seeds(), DisableCache: true})
	if err != nil {
		t.Fatalf("cluster client: %v", err)
	}
	t.Cleanup(c.Close)
	return c, func() {
		for _, m := range cl.Masters() {
			m.MustDo("FLUSHALL")
		}
	}
}

// TestClusterConformance: the suites on a three-master cluster, where a
// plan over several entities is decided slot by slot.
func TestClusterConformance(t *testing.T) {
	c, flush := cluster(t)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) storetest.Store {
		return fresh(t, c, clock, flush)
	}, storetest.WithMaxCalls(20_001))
	storetest.RunSettle(t, func(t *testing.T, clock *storetest.Clock) storetest.Settler {
		return fresh(t, c, clock, flush)
	})
	storetest.RunConcurrency(t, func(t *testing.T) []storetest.Store {
		var out []storetest.Store
		for _, s := range replicas(t, c, 3) {
			out = append(out, s)
		}
		return out
	})
}

// TestValkeyConformance: the suite on Valkey (Debian's backports package,
// which the harness fetches), the fork most Redis users can move to.
func TestValkeyConformance(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Flavor: redistest.Valkey})
	c := client(t, srv)
	t.Logf("%s", srv.Binaries().Version)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) storetest.Store {
		return fresh(t, c, clock, flushAll(t, c))
	}, storetest.WithMaxCalls(20_001))
}
