package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/storetest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// server starts a redis-server for t and returns a client of it.
func server(t *testing.T) rueidis.Client {
	t.Helper()
	c, _ := serverProc(t)
	return c
}

// serverProc is server, with the server's process.
func serverProc(t *testing.T) (rueidis.Client, *os.Process) {
	t.Helper()
	port := testutil.FreePort(t)
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1")
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var c rueidis.Client
	var err error
	for range 100 {
		c, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{fmt.Sprintf("127.0.0.1:%d", port)}, DisableCache: true})
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(c.Close)
	return c, cmd.Process
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
