package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

// fleetStore is the DynamoDB a fleet runs on: DynamoDB Local, or the
// in-process fake with DynamoDB's latencies served over HTTP.
type fleetStore interface {
	// env returns a replica's settings on a new table of the store,
	// with extra.
	env(t *testing.T, extra ...string) []string
	// freeze makes the store answer no call for d, and returns when it
	// answers again.
	freeze(t *testing.T, d time.Duration)
}

// localStore is a DynamoDB Local.
type localStore struct{ local *dynamotest.Local }

func (s localStore) env(t *testing.T, extra ...string) []string {
	t.Helper()
	return dynamoEnvAt(t, s.local, extra...)
}

// freeze stops DynamoDB Local's JVM (SIGSTOP) for d: calls reach its
// socket and wait there.
func (s localStore) freeze(t *testing.T, d time.Duration) {
	pid := s.local.Pid()
	if pid == 0 {
		t.Error("freeze: DynamoDB Local has no process of this test's")
		return
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Errorf("freeze: SIGSTOP DynamoDB Local: %v", err)
		return
	}
	time.Sleep(d)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Errorf("freeze: SIGCONT DynamoDB Local: %v", err)
	}
}

// fakeStore is one fake DynamoDB shared by the replicas, modelling
// DynamoDB's latencies, transaction conflicts and per-partition
// throughput (dynamotest.LikeDynamoDB), served over HTTP.
type fakeStore struct {
	fake     *dynamotest.Fake
	endpoint string
}

// newFakeStore starts a fakeStore that lives as long as t.
func newFakeStore(t *testing.T) *fakeStore {
	t.Helper()
	f := dynamotest.NewFake()
	f.SetOptions(dynamotest.LikeDynamoDB())
	return &fakeStore{fake: f, endpoint: dynamotest.Serve(t, f)}
}

func (s *fakeStore) env(t *testing.T, extra ...string) []string {
	t.Helper()
	return tableEnv(t, s.endpoint, extra...)
}

func (s *fakeStore) freeze(_ *testing.T, d time.Duration) {
	s.fake.Freeze(d)
	time.Sleep(d)
}

// onStores runs test as subtests on each store: "fake", the fake with
// DynamoDB's latencies, and "local", DynamoDB Local (the shared one, or
// one of the subtest's own when own is set: one it may stop).
func onStores(t *testing.T, own bool, test func(t *testing.T, store fleetStore)) {
	t.Run("fake", func(t *testing.T) { test(t, newFakeStore(t)) })
	t.Run("local", func(t *testing.T) {
		local := dynamotest.Shared(t)
		if own {
			local = dynamotest.Start(t)
		}
		test(t, localStore{local})
	})
}
