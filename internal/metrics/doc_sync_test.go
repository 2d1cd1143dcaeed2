package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// describing is a Registerer that keeps the name of every metric
// registered on it.
type describing struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return nil
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describing) Unregister(prometheus.Collector) bool { return true }

// TestDocsListEveryMetric holds docs/metrics.md in step with the metrics
// the service registers: each is named there, in backquotes.
func TestDocsListEveryMetric(t *testing.T) {
	reg := &describing{names: map[string]bool{}}
	New(reg)
	NewRLQS(reg)
	RedisObserver(reg)
	DegradeObserver(reg)
	RegisterFleetSize(reg, func() int { return 1 })
	DynamoObserver(reg)
	RegisterDynamoCaches(reg, func() []dynamo.CacheStats { return nil })
	ProcessLateness(reg)(time.Millisecond)
	PollerObserver(reg)
	AggregatorObserver(reg)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for name := range reg.names {
		if !strings.Contains(string(doc), "`"+name+"`") {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/metrics.md does not list %d registered metrics: %s", len(missing), strings.Join(missing, ", "))
	}
	if len(reg.names) < 40 {
		t.Errorf("only %d metrics registered: the test no longer sees them", len(reg.names))
	}
}
