package main

import (
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAggregatorPortClash runs the aggregator on a debug port in use (a
// serve's, beside it): it names the setting that moves it, before it
// calls DynamoDB.
func TestAggregatorPortClash(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	env := map[string]string{"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": port, "DYNAMODB_ENDPOINT": "http://127.0.0.1:1", "AWS_REGION": "us-east-1"}
	code, _, errOut := runMain(t, env, "aggregator")
	want := "debug listener 127.0.0.1:" + port + ": address already in use (is a ratelimit serve running here? set DEBUG_PORT or -debug_port to move it)"
	if code != exitFailure || !strings.Contains(errOut, want) {
		t.Errorf("aggregator on a port in use = exit %d, %q; want 1 and %q", code, errOut, want)
	}
}

// TestAggregatorStopsOnSIGTERM: SIGTERM ends the aggregator with a
// stopped line and exit 0.
func TestAggregatorStopsOnSIGTERM(t *testing.T) {
	p := startAggregator(t, dynamoEnv(t))
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(p.Output(), "polling the table's stream"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("aggregator did not start polling:\n%s", lastLines(p.Output(), 10))
		}
	}
	if err := p.Stop(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("aggregator after SIGTERM: %v\n%s", err, lastLines(p.Output(), 10))
	}
	if !strings.Contains(p.Output(), `"aggregator stopped"`) && !strings.Contains(p.Output(), "msg=\"aggregator stopped\"") {
		t.Errorf("aggregator's output after SIGTERM lacks its stopped line:\n%s", lastLines(p.Output(), 10))
	}
}
