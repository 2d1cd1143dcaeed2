package dynamoload

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// clkTck is the kernel's USER_HZ (getconf CLK_TCK), the unit of the CPU
// times in /proc/PID/stat and /proc/stat.
const clkTck = 100

// Processes whose CPU a run accounts for (snapshot.ticks).
const (
	procService = "service"
	procLocal   = "dynamodb-local"
	procDriver  = "driver"
)

// snapshot is one side of a measured run: the CPU ticks of each process,
// the machine's busy ticks, and the service's metrics.
type snapshot struct {
	ticks   map[string]int64   // process → utime+stime, in clock ticks
	busy    int64              // every CPU's busy ticks (/proc/stat)
	metrics map[string]float64 // series as /metrics prints it → value
}

// sum adds up the samples of metric name whose labels contain each of
// match (e.g. `operation="UpdateItem"`).
func (s snapshot) sum(name string, match ...string) float64 {
	var n float64
	for series, v := range s.metrics {
		base, labels, _ := strings.Cut(series, "{")
		if base != name {
			continue
		}
		all := true
		for _, m := range match {
			all = all && strings.Contains(labels, m)
		}
		if all {
			n += v
		}
	}
	return n
}

// byLabel adds up the samples of metric name by the value of label.
func (s snapshot) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for series, v := range s.metrics {
		base, labels, _ := strings.Cut(series, "{")
		if base != name {
			continue
		}
		_, val, ok := strings.Cut(labels, label+`="`)
		if !ok {
			continue
		}
		val, _, _ = strings.Cut(val, `"`)
		out[val] += v
	}
	return out
}

// load is what the callers saw in one measured run.
type load struct {
	ok, over int64 // answers OK and OVER_LIMIT
	failed   int64 // calls answered with a gRPC status other than OK
	firstErr string
	// lat holds the latency of every answer that may be a decision: OK
	// answers, and OVER_LIMIT ones when the scenario refuses.
	lat  []time.Duration
	secs float64
}

// result is one measured run of one scenario at one number of callers.
type result struct {
	scenario string
	refuses  bool // OVER_LIMIT answers are decisions of the rule
	callers  int
	conns    int
	load
	// From the service's metrics, over the run: answers decided by
	// ON_UNAVAILABLE (allowed, blocked), refusals because the decision's own
	// item was too busy, DynamoDB calls, conditional bucket writes
	// (UpdateItem), batched writes and the decisions they carried, the
	// seconds UpdateItem calls took, and rejection-cache answers.
	allowed, blocked, busy float64
	calls, writes          float64
	batches, batched       float64
	writeCalls, writeSecs  float64
	cacheHits              float64
	// ops is the DynamoDB calls by operation.
	ops map[string]float64
	// cpu is each process's CPU over the run (seconds); other is the CPU
	// of every other process on the machine.
	cpu   map[string]float64
	other float64
}

// newResult derives a run's figures from what the callers saw and the
// snapshots taken before and after it.
func newResult(scenario string, refuses bool, callers, conns int, l load, before, after snapshot) result {
	d := func(name string, match ...string) float64 {
		return after.sum(name, match...) - before.sum(name, match...)
	}
	r := result{
		scenario: scenario, refuses: refuses, callers: callers, conns: conns, load: l,
		allowed:    d("ratelimit_on_unavailable_total", `decision="allowed"`),
		blocked:    d("ratelimit_on_unavailable_total", `decision="blocked"`),
		busy:       d("ratelimit_dynamodb_contended_total"),
		calls:      d("ratelimit_dynamodb_calls_total"),
		writes:     d("ratelimit_dynamodb_calls_total", `operation="UpdateItem"`),
		batches:    d("ratelimit_dynamodb_batch_decisions_count"),
		batched:    d("ratelimit_dynamodb_batch_decisions_sum"),
		writeCalls: d("ratelimit_dynamodb_call_duration_seconds_count", `operation="UpdateItem"`),
		writeSecs:  d("ratelimit_dynamodb_call_duration_seconds_sum", `operation="UpdateItem"`),
		cacheHits:  d("ratelimit_dynamodb_rejection_cache_hits_total"),
		cpu:        map[string]float64{},
		ops:        map[string]float64{},
	}
	b0 := before.byLabel("ratelimit_dynamodb_calls_total", "operation")
	for op, n := range after.byLabel("ratelimit_dynamodb_calls_total", "operation") {
		if n > b0[op] {
			r.ops[op] = n - b0[op]
		}
	}
	var ours int64
	for p, t := range after.ticks {
		if t0, ok := before.ticks[p]; ok {
			r.cpu[p] = float64(t-t0) / clkTck
			ours += t - t0
		}
	}
	r.other = max(float64(after.busy-before.busy-ours)/clkTck, 0)
	slices.Sort(r.lat)
	return r
}

// decisions counts the answers that the store decided: OK answers, and
// OVER_LIMIT ones when the scenario's rule refuses, less those that
// ON_UNAVAILABLE decided. In the throughput scenarios, whose rule never
// refuses, an OVER_LIMIT answer is a refusal for contention (busy) or
// ON_UNAVAILABLE, and no decision.
func (r result) decisions() float64 {
	n := float64(r.ok) - r.allowed
	if r.refuses {
		n += float64(r.over) - r.blocked
	}
	return max(n, 0)
}

// failures counts the calls that were no decision: a gRPC status other than
// OK, or an answer made by ON_UNAVAILABLE.
func (r result) failures() float64 { return float64(r.failed) + r.allowed + r.blocked }

// unexpected counts OVER_LIMIT answers of a rule that never refuses that
// neither contention nor ON_UNAVAILABLE explains.
func (r result) unexpected() float64 {
	if r.refuses {
		return 0
	}
	return max(float64(r.over)-r.blocked-r.busy, 0)
}

func (r result) rate() float64 { return r.decisions() / r.secs }

func (r result) percentile(p int) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)*p/100, len(r.lat)-1)]
}

// perDecision is x per decision, or NaN without decisions.
func (r result) perDecision(x float64) float64 {
	if n := r.decisions(); n > 0 {
		return x / n
	}
	return math.NaN()
}

// cpuPerDecision is process p's CPU per decision in µs.
func (r result) cpuPerDecision(p string) float64 {
	v, ok := r.cpu[p]
	if !ok {
		return math.NaN()
	}
	return r.perDecision(v * 1e6)
}

// cores is how many cores process p kept busy on average.
func (r result) cores(p string) float64 {
	v, ok := r.cpu[p]
	if !ok || r.secs <= 0 {
		return math.NaN()
	}
	return v / r.secs
}

// meanBatch is the mean number of decisions one conditional bucket write
// carried.
func (r result) meanBatch() float64 {
	if r.batches == 0 {
		return math.NaN()
	}
	return r.batched / r.batches
}

// writeMs is the mean latency of an UpdateItem call, in ms.
func (r result) writeMs() float64 {
	if r.writeCalls == 0 {
		return math.NaN()
	}
	return r.writeSecs / r.writeCalls * 1e3
}

// num formats x with prec decimals, or "–" for NaN.
func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// summary is one line about r for the test log.
func (r result) summary() string {
	ops := slices.Sorted(maps.Keys(r.ops))
	for i, op := range ops {
		ops[i] = fmt.Sprintf("%s %.0f", op, r.ops[op])
	}
	return fmt.Sprintf("%s, %d callers: %.0f decisions/s, p50 %v, p99 %v, %.0f errors (first gRPC error: %s), %.0f busy, %s calls/decision (%s), mean batch %s, write %s ms",
		r.scenario, r.callers, r.rate(), r.percentile(50), r.percentile(99), r.failures(), cmp.Or(r.firstErr, "none"), r.busy,
		num(r.perDecision(r.calls), 3), cmp.Or(strings.Join(ops, ", "), "none"), num(r.meanBatch(), 1), num(r.writeMs(), 1))
}

// tableHeader is the header of a scenario's table.
const tableHeader = "| callers | conns | decisions/s | p50 ms | p99 ms | errors | busy | service CPU µs/decision | DynamoDB Local CPU µs/decision | driver CPU µs/decision | DynamoDB Local cores | other load, cores | DynamoDB calls/decision | writes/decision | mean batch | write ms | rejection-cache answers/decision |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

// row formats r as a line of its scenario's table.
func (r result) row() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("| %d | %d | %.0f | %s | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		r.callers, r.conns, r.rate(), ms(r.percentile(50)), ms(r.percentile(99)), r.failures(), r.busy,
		num(r.cpuPerDecision(procService), 0), num(r.cpuPerDecision(procLocal), 0), num(r.cpuPerDecision(procDriver), 0),
		num(r.cores(procLocal), 2), num(r.other/r.secs, 2),
		num(r.perDecision(r.calls), 3), num(r.perDecision(r.writes), 3), num(r.meanBatch(), 1), num(r.writeMs(), 1),
		num(r.perDecision(r.cacheHits), 3))
}

// report formats the results as one Markdown table per scenario, in the
// order the scenarios ran, each titled with its name and its note.
func report(results []result, header string, notes map[string]string) string {
	var b strings.Builder
	b.WriteString(header)
	var order []string
	for _, r := range results {
		if !slices.Contains(order, r.scenario) {
			order = append(order, r.scenario)
		}
	}
	for _, sc := range order {
		title := "**" + sc + "**"
		if n := notes[sc]; n != "" {
			title += ": " + n + "."
		}
		fmt.Fprintf(&b, "\n%s\n\n%s", title, tableHeader)
		for _, r := range results {
			if r.scenario == sc {
				b.WriteString(r.row())
			}
		}
	}
	return b.String()
}

// TestReport checks the figures a run derives from two snapshots, without
// DynamoDB Local (the benchmark itself is behind the dynamobench tag).
func TestReport(t *testing.T) {
	before := snapshot{
		ticks: map[string]int64{procService: 100, procLocal: 1000, procDriver: 50},
		busy:  5000,
		metrics: map[string]float64{
			`ratelimit_dynamodb_calls_total{operation="UpdateItem",outcome="ok"}`:            10,
			`ratelimit_dynamodb_calls_total{operation="GetItem",outcome="ok"}`:               5,
			`ratelimit_dynamodb_batch_decisions_sum{level="own"}`:                            40,
			`ratelimit_dynamodb_batch_decisions_count{level="own"}`:                          10,
			`ratelimit_dynamodb_call_duration_seconds_sum{operation="UpdateItem"}`:           0.05,
			`ratelimit_dynamodb_call_duration_seconds_count{operation="UpdateItem"}`:         10,
			`ratelimit_dynamodb_call_duration_seconds_bucket{operation="UpdateItem",le="1"}`: 10,
		},
	}
	after := snapshot{
		ticks: map[string]int64{procService: 300, procLocal: 1400, procDriver: 150},
		busy:  5900, // 700 ticks ours, 200 the rest of the machine
		metrics: map[string]float64{
			`ratelimit_dynamodb_calls_total{operation="UpdateItem",outcome="ok"}`:            110,
			`ratelimit_dynamodb_calls_total{operation="UpdateItem",outcome="timeout"}`:       2,
			`ratelimit_dynamodb_calls_total{operation="GetItem",outcome="ok"}`:               13,
			`ratelimit_dynamodb_batch_decisions_sum{level="own"}`:                            1040,
			`ratelimit_dynamodb_batch_decisions_count{level="own"}`:                          110,
			`ratelimit_dynamodb_call_duration_seconds_sum{operation="UpdateItem"}`:           0.65,
			`ratelimit_dynamodb_call_duration_seconds_count{operation="UpdateItem"}`:         112,
			`ratelimit_dynamodb_call_duration_seconds_bucket{operation="UpdateItem",le="1"}`: 112,
			`ratelimit_on_unavailable_total{decision="blocked"}`:                             2,
			`ratelimit_dynamodb_contended_total{reason="queued"}`:                            3,
		},
	}
	l := load{ok: 1000, over: 5, failed: 1, firstErr: "rpc error: code = DeadlineExceeded", secs: 4, lat: []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}}
	r := newResult("hot", false, 16, 8, l, before, after)

	check := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("decisions", r.decisions(), 1000)      // OK answers; OVER_LIMIT is no decision here
	check("failures", r.failures(), 3)           // 1 gRPC status + 2 ON_UNAVAILABLE
	check("unexpected", r.unexpected(), 0)       // 5 OVER_LIMIT = 2 blocked + 3 busy
	check("rate", r.rate(), 250)                 // 1000 in 4 s
	check("calls", r.perDecision(r.calls), 0.11) // 102 UpdateItem + 8 GetItem
	check("writes", r.perDecision(r.writes), 0.102)
	check("mean batch", r.meanBatch(), 10)    // 1000 decisions in 100 writes
	check("write ms", r.writeMs(), 600.0/102) // 0.6 s over 102 UpdateItem calls
	check("service µs", r.cpuPerDecision(procService), 2000)
	check("local cores", r.cores(procLocal), 1)
	check("other cores", r.other/r.secs, 0.5)
	if got := r.percentile(50); got != 2*time.Millisecond {
		t.Errorf("p50 = %v, want 2ms", got)
	}

	if got, want := r.summary(), "hot, 16 callers: 250 decisions/s, p50 2ms, p99 3ms, 3 errors (first gRPC error: rpc error: code = DeadlineExceeded), 3 busy, 0.110 calls/decision (GetItem 8, UpdateItem 102), mean batch 10.0, write 5.9 ms"; got != want {
		t.Errorf("summary:\n got %s\nwant %s", got, want)
	}

	refusing := newResult("refuse", true, 16, 8, l, before, after)
	check("refusing decisions", refusing.decisions(), 1003) // OK + OVER_LIMIT − blocked
	check("refusing unexpected", refusing.unexpected(), 0)

	out := report([]result{r, refusing}, "header\n", map[string]string{"refuse": "note"})
	for _, want := range []string{
		"header\n\n**hot**\n\n| callers |",
		"| 16 | 8 | 250 | 2.00 | 3.00 | 3 | 3 | 2000 | 4000 | 1000 | 1.00 | 0.50 | 0.110 | 0.102 | 10.0 | 5.9 | 0.000 |\n",
		"\n**refuse**: note.\n\n| callers |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
