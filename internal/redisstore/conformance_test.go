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
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(c.Close)
	return c, srv
}

func TestConformance(t *testing.T) {
	c := server(t)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) storetest.Store {
		if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		s := redisstore.New(c, redisstore.Config{Now: clock.Now, Timeout: time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}, storetest.WithMaxCalls(60_001)) // a call is about 0.1 ms here
}

func TestSettleConformance(t *testing.T) {
	c := server(t)
	storetest.RunSettle(t, func(t *testing.T, clock *storetest.Clock) storetest.Settler {
		if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		s := redisstore.New(c, redisstore.Config{Now: clock.Now, Timeout: time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestConcurrency(t *testing.T) {
	c := server(t)
	storetest.RunConcurrency(t, func(t *testing.T) []storetest.Store {
		var out []storetest.Store
		for range 3 {
			s := redisstore.New(c, redisstore.Config{Namespace: t.Name(), Timeout: time.Second})
			t.Cleanup(func() { _ = s.Close() })
			out = append(out, s)
		}
		return out
	})
}

func TestSettleConcurrency(t *testing.T) {
	c := server(t)
	storetest.RunSettleConcurrency(t, func(t *testing.T) []storetest.Settler {
		var out []storetest.Settler
		for range 3 {
			s := redisstore.New(c, redisstore.Config{Namespace: t.Name(), Timeout: time.Second})
			t.Cleanup(func() { _ = s.Close() })
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
		flush()
		s := redisstore.New(c, redisstore.Config{Now: clock.Now, Timeout: time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}, storetest.WithMaxCalls(20_001))
	storetest.RunSettle(t, func(t *testing.T, clock *storetest.Clock) storetest.Settler {
		flush()
		s := redisstore.New(c, redisstore.Config{Now: clock.Now, Timeout: time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
	storetest.RunConcurrency(t, func(t *testing.T) []storetest.Store {
		var out []storetest.Store
		for range 3 {
			s := redisstore.New(c, redisstore.Config{Namespace: t.Name(), Timeout: time.Second})
			t.Cleanup(func() { _ = s.Close() })
			out = append(out, s)
		}
		return out
	})
}

// TestValkeyConformance: the suite on Valkey (Debian's backports package,
// which the harness fetches), the fork most Redis users can move to.
func TestValkeyConformance(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Flavor: redistest.Valkey})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(c.Close)
	t.Logf("%s", srv.Binaries().Version)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) storetest.Store {
		srv.MustDo("FLUSHALL")
		s := redisstore.New(c, redisstore.Config{Now: clock.Now, Timeout: time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}, storetest.WithMaxCalls(20_001))
}
