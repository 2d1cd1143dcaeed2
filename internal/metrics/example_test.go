package metrics_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func Example() {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.ObserveReload(true, time.Unix(1700000000, 0))
	m.ObserveDecision("api", true, 80*time.Microsecond)

	// A domain's first decision exports both of its codes (OK at zero).
	n, err := testutil.GatherAndCount(reg, "ratelimit_decisions_total")
	fmt.Println(n, err)
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_config_last_reload_successful Whether the last descriptor configuration reload succeeded (1) or failed (0).
# TYPE ratelimit_config_last_reload_successful gauge
ratelimit_config_last_reload_successful 1
`), "ratelimit_config_last_reload_successful")
	fmt.Println(err)
	// Output:
	// 2 <nil>
	// <nil>
}
