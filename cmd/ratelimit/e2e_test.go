package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// proc is a running binary.
type proc = testutil.Server

// startBinary runs `ratelimit serve` on free loopback ports with env added.
func startBinary(t *testing.T, configDir string, env ...string) *proc {
	t.Helper()
	return startBinaryArgs(t, []string{"serve", "-config_dir", configDir}, env...)
}

// startBinaryArgs runs the binary with args on free loopback ports with env
// added, and waits until /healthcheck answers 200.
func startBinaryArgs(t *testing.T, args []string, env ...string) *proc {
	t.Helper()
	return launch(t, args, nil, env...)
}

// startBinaryUnready runs `ratelimit serve` like startBinary, but waits only
// until /healthcheck answers, ready or not.
func startBinaryUnready(t *testing.T, configDir string, env ...string) *proc {
	t.Helper()
	return launch(t, []string{"serve", "-config_dir", configDir}, func(int) bool { return true }, env...)
}

// launch runs the binary with args on free loopback ports with env added,
// and waits until /healthcheck answers a code that ready accepts (nil: 200).
// The cleanup kills it.
func launch(t *testing.T, args []string, ready func(code int) bool, env ...string) *proc {
	t.Helper()
	return testutil.StartServer(t, testutil.ServerOptions{
		Args:  args,
		Env:   append([]string{"SHUTDOWN_DRAIN=100ms", "LOG_LEVEL=info"}, env...),
		Ready: ready,
	})
}

func writeConfig(t *testing.T, dir, name, yaml string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

const e2eConfig = `domain: e2e
descriptors:
  - key: generic_key
    value: three
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: generic_key
    value: plenty
    rate_limit:
      unit: minute
      requests_per_unit: 100
`

func descriptor(key, value string) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
}

func TestBinaryServesEnvoy(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startBinary(t, dir)

	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewRateLimitServiceClient(cc)
	ctx := context.Background()

	// 3 per minute: OK, OK, OK, OVER_LIMIT with remaining 2, 1, 0, 0.
	wantCodes := []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}
	wantRemaining := []uint32{2, 1, 0, 0}
	for i := range wantCodes {
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "three")}})
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got := resp.GetOverallCode(); got != wantCodes[i] {
			t.Errorf("call %d: overall_code = %v, want %v", i+1, got, wantCodes[i])
		}
		if got := resp.GetStatuses()[0].GetLimitRemaining(); got != wantRemaining[i] {
			t.Errorf("call %d: limit_remaining = %d, want %d", i+1, got, wantRemaining[i])
		}
	}

	// Two descriptors, one exhausted: refused, and the other keeps its tokens.
	resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{
		descriptor("generic_key", "plenty"), descriptor("generic_key", "three")}})
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("two descriptors = %v, %v, want OVER_LIMIT", resp, err)
	}
	resp, err = client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("generic_key", "plenty")}})
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 99 {
		t.Errorf("plenty after a refused request: remaining = %d (%v), want 99: the refused request debited nothing", resp.GetStatuses()[0].GetLimitRemaining(), err)
	}

	// Empty domain: InvalidArgument.
	if _, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{descriptor("k", "v")}}); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Errorf("empty domain error = %v, want InvalidArgument", err)
	}

	// /json answers 429 once exhausted.
	body := `{"domain":"e2e","descriptors":[{"entries":[{"key":"generic_key","value":"three"}]}]}`
	jr, err := http.Post("http://"+p.HTTPAddr()+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	jb, _ := io.ReadAll(jr.Body)
	jr.Body.Close()
	if jr.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(jb), "OVER_LIMIT") {
		t.Errorf("POST /json = %d %s, want 429 with OVER_LIMIT", jr.StatusCode, jb)
	}

	// Metrics on the debug port.
	mr, err := http.Get("http://" + p.DebugAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	for _, want := range []string{"ratelimit_", "ratelimit_config_last_reload_successful 1"} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Reflection lists the rate-limit service.
	stream, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	lr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	if !strings.Contains(fmt.Sprint(lr.GetListServicesResponse().GetService()), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection services = %v, want the RLS", lr.GetListServicesResponse().GetService())
	}

	// SIGTERM: exits 0 after draining.
	if err := p.Process().Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Process().Exited():
		if err := p.Process().Err(); err != nil {
			t.Errorf("exit after SIGTERM = %v, want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("binary did not exit within 10s of SIGTERM")
	}
}

func TestBinaryReloadsConfig(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startBinary(t, dir)
	cc, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewRateLimitServiceClient(cc)
	ask := func(domain string) *pb.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{descriptor("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A new file is picked up.
	writeConfig(t, dir, "new.yaml", "domain: added\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	waitFor("the new domain", func() bool { return ask("added").GetStatuses()[0].GetCurrentLimit() != nil })

	// A bad file keeps the old config serving and is reported in metrics.
	writeConfig(t, dir, "new.yaml", "domain: added\ndescriptors:\n  - key: k\n    rate_limt: {unit: hour, requests_per_unit: 1}\n")
	waitFor("the failed reload metric", func() bool {
		resp, err := http.Get("http://" + p.DebugAddr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "ratelimit_config_last_reload_successful 0")
	})
	if ask("added").GetStatuses()[0].GetCurrentLimit() == nil {
		t.Error("a bad reload replaced the serving config")
	}
	if !strings.Contains(p.Output(), "rate_limt") {
		t.Errorf("the log does not name the bad key rate_limt:\n%s", p.Output())
	}

	// SIGHUP reloads too (after fixing the file without relying on the watcher).
	writeConfig(t, dir, "new.yaml", "domain: added\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	if err := p.Process().Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the fixed config", func() bool {
		return ask("added").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	})
}

func TestCheckConfig(t *testing.T) {
	good := t.TempDir()
	writeConfig(t, good, "e2e.yaml", e2eConfig)
	bad := t.TempDir()
	writeConfig(t, bad, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	writeConfig(t, bad, "b.yaml", "domain: b\ndescriptors:\n  - key: k\n    valeu: x\n")
	empty := t.TempDir()
	noRules := t.TempDir()
	writeConfig(t, noRules, "d.yaml", "domain: d\n")
	envoyDir := filepath.Join("..", "..", "examples", "envoy")
	// Every bootstrap in examples/envoy is one problem of loading the
	// directory as descriptor files.
	bootstraps, err := filepath.Glob(filepath.Join(envoyDir, "*.yaml"))
	if err != nil || len(bootstraps) < 2 {
		t.Fatalf("bootstraps in %s: %v (%v)", envoyDir, bootstraps, err)
	}

	tests := []struct {
		name     string
		dir      string
		code     int
		contains []string
	}{
		{"good", good, 0, []string{"OK"}},
		{"every problem listed", bad, 1, []string{"a.yaml:4", "fortnight", "b.yaml:4", "valeu"}},
		{"example config", filepath.Join("..", "..", "examples", "config"), 0, []string{"OK"}},
		{"empty directory", empty, 0, []string{
			"warning: " + empty + ": no descriptor files (0 domains, 0 rules): the service would answer every request OK\n",
			empty + ": 0 domains, 0 rules: OK, 1 warning (-strict fails on warnings)\n"}},
		{"empty directory, strict", empty + " -strict", 1, []string{empty + ": 0 domains, 0 rules: 1 warning: FAIL (-strict)\n"}},
		{"domain without rules", noRules, 0, []string{"warning: " + noRules + ": 0 rules: the service would answer every request OK\n"}},
		{"Envoy bootstraps", envoyDir, 1, []string{
			fmt.Sprintf("descriptors: %d problems:\n", len(bootstraps)),
			filepath.Join(envoyDir, "envoy.yaml") + ":15: this is an Envoy bootstrap (top-level admin, static_resources), not a descriptor file; descriptor files have 'domain:' and 'descriptors:' (the descriptor files here are in " + filepath.Join(envoyDir, "config") + ")\n",
			"hint: point -config_dir (CONFIG_DIR) at the descriptor files only: -config_dir " + filepath.Join(envoyDir, "config") + "\n"}},
		{"missing directory", "/nonexistent", 1, []string{"ratelimit check-config: descriptor directory /nonexistent (from -config_dir or CONFIG_DIR) does not exist: point -config_dir or CONFIG_DIR at the directory holding your descriptor YAML files\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"check-config", "-config_dir"}, strings.Fields(tt.dir)...)
			code := Main(context.Background(), args, func(string) string { return "" }, &out, &errOut)
			all := out.String() + errOut.String()
			if code != tt.code {
				t.Errorf("check-config %s = exit %d, want %d\n%s", tt.dir, code, tt.code, all)
			}
			for _, want := range tt.contains {
				if !strings.Contains(all, want) {
					t.Errorf("check-config %s output lacks %q:\n%s", tt.dir, want, all)
				}
			}
		})
	}
}
