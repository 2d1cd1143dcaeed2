package sidebyside

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

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
	bin := testutil.Binary(t)
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
	got, out, err := ProbeUDS(context.Background(), testutil.Binary(t), []string{"serve"}, t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got != rec.UDS {
		t.Errorf("with GRPC_UDS: %+v, envoyproxy/ratelimit: %+v\n%s", got, rec.UDS, out)
	}
}
