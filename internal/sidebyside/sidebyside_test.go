package sidebyside

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds ./cmd/ratelimit once per test run. It skips t under
// -short (the fast loop builds no binary).
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("sidebyside: needs the built ratelimit binary, which -short does not build")
	}
	buildOnce.Do(func() {
		root, err := Runtime()
		if err != nil {
			buildErr = err
			return
		}
		repo := filepath.Join(root, "..", "..", "..", "..")
		dir, err := os.MkdirTemp("", "sidebyside-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ratelimit")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/ratelimit")
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ratelimit: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func recorded(t *testing.T) Recording {
	t.Helper()
	root, err := Runtime()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(root), "recorded.json"))
	if err != nil {
		t.Fatalf("the recorded answers (go run ./internal/sidebyside/record): %v", err)
	}
	var rec Recording
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestAgainstEnvoyproxyRatelimit replays every scenario against this
// repository's binary (embedded store) and compares each answer with
// envoyproxy/ratelimit's, field by field; a step marked Differs is compared
// with the answer this service gives by design.
func TestAgainstEnvoyproxyRatelimit(t *testing.T) {
	rec := recorded(t)
	bin := binary(t)
	for _, sc := range Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			want, ok := rec.Answers[sc.Name]
			if !ok || len(want) != len(sc.Steps) {
				t.Fatalf("recorded %d answers for %s, want %d: record again (go run ./internal/sidebyside/record)", len(want), sc.Name, len(sc.Steps))
			}
			got, series, out, err := RunScenario(context.Background(), bin, []string{"serve"}, sc)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for i, st := range sc.Steps {
				w := want[i]
				if st.Differs != "" {
					w = *st.Ours
				}
				if !reflect.DeepEqual(got[i], w) {
					note := ""
					if st.Differs != "" {
						note = " (by design: " + st.Differs + ")"
					}
					t.Errorf("step %d %v:\n got  %+v\n want %+v%s", i, st.Descs, got[i], w, note)
				}
			}
			if sc.Scrape && !reflect.DeepEqual(series, rec.Series[sc.Name]) {
				t.Errorf("Prometheus series at PROMETHEUS_ADDR:\n%s\nenvoyproxy/ratelimit's:\n%s", strings.Join(series, "\n"), strings.Join(rec.Series[sc.Name], "\n"))
			}
		})
	}
}

// TestGRPCUDSAsEnvoyproxyRatelimit: with GRPC_UDS, both answer over the
// socket and neither on GRPC_PORT.
func TestGRPCUDSAsEnvoyproxyRatelimit(t *testing.T) {
	rec := recorded(t)
	got, out, err := ProbeUDS(context.Background(), binary(t), []string{"serve"}, t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got != rec.UDS {
		t.Errorf("with GRPC_UDS: %+v, envoyproxy/ratelimit: %+v\n%s", got, rec.UDS, out)
	}
}
