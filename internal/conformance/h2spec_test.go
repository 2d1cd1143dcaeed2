package conformance

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
	"github.com/dynalimit/dynalimit/internal/server"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// rlsMethod is the path of h2spec's requests: the rate-limit call.
const rlsMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// knownH2specFailures are the h2spec cases that fail on both transports,
// each with its reason. A case may fail on native only if it is listed here
// (or in h2specNotForNative or h2specRacy), and a listed case must still
// fail on both: when one passes, take it off.
var knownH2specFailures = map[string]string{
	"generic/2/2": "h2spec waits for a DATA frame in the response; a gRPC call without a request message " +
		"is answered trailers-only (one HEADERS frame with grpc-status and END_STREAM), as the gRPC wire spec allows",
	"generic/2/3": "as generic/2/2: the answer is trailers-only, with no DATA frame for h2spec to wait for",
}

// h2specRacy are the cases whose outcome depends on timing, on either
// transport, with the reason: the test logs them and asserts nothing.
var h2specRacy = map[string]string{
	"http2/5.1.2/1": "h2spec sets INITIAL_WINDOW_SIZE to 0 to keep its streams open, waiting to send DATA; but a gRPC " +
		"call without a message is answered trailers-only (HEADERS, which flow control does not hold), so a " +
		"stream ends as soon as its handler returns, and SETTINGS_MAX_CONCURRENT_STREAMS is exceeded (and the " +
		"extra stream refused, as h2spec wants) only when handlers on goroutines lag behind h2spec's writes",
}

// h2specNotForNative are the cases whose expectation does not hold for the
// native transport's settings, each with the reason and what native must
// answer instead (a substring of h2spec's account of what it saw).
var h2specNotForNative = map[string]struct{ reason, answer string }{
	"http2/4.2/3": {
		reason: "h2spec sends a HEADERS frame of about 20 KB and expects FRAME_SIZE_ERROR from a server that keeps " +
			"the default SETTINGS_MAX_FRAME_SIZE of 16 KiB, without reading the server's SETTINGS; the native " +
			"transport advertises 1 MiB, as Go's HTTP/2 server does, so the frame is within its limit " +
			"(RFC 9113 §4.2) and the call is answered",
		answer: "HEADERS Frame",
	},
}

// h2specStores are the stores the binary serves h2spec's calls on: the
// embedded store answers calls on the connection's reader (native
// transport, Inline), DynamoDB on goroutines of their own.
var h2specStores = []string{"embedded", "dynamodb"}

// TestH2spec runs h2spec against the ratelimit binary on each store and
// transport, and holds native to grpc-go case by case.
func TestH2spec(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance: h2spec runs against the ratelimit binary, which -short does not build")
	}
	h2spec, err := h2specBinary()
	if err != nil {
		t.Fatal(err)
	}
	root, err := testutil.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	configDir := filepath.Join(root, "examples", "config")
	env := map[string][]string{"embedded": nil, "dynamodb": envoytest.DynamoDBTable(t, dynamotest.Start(t))}

	// The four runs go at once, each in sections at once (runH2spec).
	type run struct {
		name string
		port int
		rep  h2specReport
		err  error
	}
	var runs []*run
	for _, store := range h2specStores {
		for _, transport := range []string{server.TransportNative, server.TransportGRPCGo} {
			svc := envoytest.StartService(t, configDir, append(env[store], "GRPC_TRANSPORT="+transport)...)
			runs = append(runs, &run{name: store + "/" + transport, port: svc.GRPCPort})
		}
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() { r.rep, r.err = runH2spec(h2spec, r.port) })
	}
	wg.Wait()
	reports := map[string]h2specReport{}
	for _, r := range runs {
		if r.err != nil {
			t.Fatalf("h2spec on %s: %v", r.name, r.err)
		}
		reports[r.name] = r.rep
	}
	for _, store := range h2specStores {
		t.Run(store, func(t *testing.T) {
			compareH2spec(t, reports[store+"/"+server.TransportNative], reports[store+"/"+server.TransportGRPCGo])
		})
	}
}

// h2specShards are h2spec's sections, run at once: each mostly waits out
// its cases' 2 s timeouts, so the whole runs in the time of its longest
// section instead of their sum.
var h2specShards = []string{"generic", "hpack", "http2/3", "http2/4", "http2/5", "http2/6", "http2/7", "http2/8"}

// runH2spec runs every h2spec case against 127.0.0.1:port, a process per
// section of h2specShards at once, and returns their JUnit reports as one.
func runH2spec(h2spec string, port int) (h2specReport, error) {
	parts := make([]h2specReport, len(h2specShards))
	errs := make([]error, len(h2specShards))
	var wg sync.WaitGroup
	for i, shard := range h2specShards {
		wg.Go(func() { parts[i], errs[i] = runH2specShard(h2spec, port, shard) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return h2specReport{}, err
	}
	all := h2specReport{cases: map[string]h2specCase{}}
	for _, p := range parts {
		for _, id := range p.ids {
			all.ids = append(all.ids, id)
			all.cases[id] = p.cases[id]
		}
	}
	return all, nil
}

// runH2specShard runs the h2spec cases of one section (spec) against
// 127.0.0.1:port and returns its JUnit report.
func runH2specShard(h2spec string, port int, spec string) (h2specReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "h2spec-")
	if err != nil {
		return h2specReport{}, err
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "report.xml")
	cmd := exec.CommandContext(ctx, h2spec, spec, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-P", rlsMethod, "-j", report)
	out, err := cmd.CombinedOutput() // non-zero when a case fails
	b, rerr := os.ReadFile(report)
	if rerr != nil {
		return h2specReport{}, fmt.Errorf("conformance: h2spec %s wrote no report: %w\n%s", spec, errors.Join(rerr, err), out)
	}
	rep, perr := parseH2specReport(b)
	if perr == nil && len(rep.ids) == 0 {
		perr = errors.New("no cases")
	}
	if perr != nil {
		return h2specReport{}, fmt.Errorf("conformance: h2spec %s's report: %w\n%s", spec, errors.Join(perr, err), out)
	}
	return rep, nil
}

// compareH2spec fails for each case that fails on native and is not known
// to fail on both, and for each known failure that no longer fails on both.
func compareH2spec(t *testing.T, native, grpcgo h2specReport) {
	t.Helper()
	var regressions, stale, better, remainder []string
	for _, id := range native.ids {
		n := native.cases[id]
		g, ok := grpcgo.cases[id]
		if !ok {
			t.Errorf("h2spec case %s ran on native, not on grpc-go", id)
			continue
		}
		reason, known := knownH2specFailures[id]
		nf, notForNative := h2specNotForNative[id]
		switch {
		case h2specRacy[id] != "":
			remainder = append(remainder, fmt.Sprintf("%s %q: %s on native, %s on grpc-go (racy: %s)", id, n.name, n.outcome, g.outcome, h2specRacy[id]))
		case notForNative && n.outcome != failed:
			stale = append(stale, fmt.Sprintf("%s %q: %s on native (listed in h2specNotForNative: %s)", id, n.name, n.outcome, nf.reason))
		case notForNative && !strings.HasPrefix(n.seen, nf.answer):
			regressions = append(regressions, fmt.Sprintf("%s %q: on native: %s, not the %s h2specNotForNative expects (%s)", id, n.name, n.detail, nf.answer, nf.reason))
		case notForNative:
			remainder = append(remainder, fmt.Sprintf("%s %q: on native, by design: %s", id, n.name, nf.reason))
		case known && n.outcome != failed:
			stale = append(stale, fmt.Sprintf("%s %q: %s on native (listed: %s)", id, n.name, n.outcome, reason))
		case known && g.outcome != failed:
			stale = append(stale, fmt.Sprintf("%s %q: %s on grpc-go (listed: %s)", id, n.name, g.outcome, reason))
		case known:
			remainder = append(remainder, fmt.Sprintf("%s %q: on native: %s; on grpc-go: %s", id, n.name, n.detail, g.detail))
		case n.outcome == failed:
			regressions = append(regressions, fmt.Sprintf("%s %q: %s on grpc-go; on native: %s", id, n.name, g.outcome, n.detail))
		case n.outcome == passed && g.outcome == failed:
			better = append(better, fmt.Sprintf("%s %q", id, n.name))
		}
	}
	for _, ids := range []map[string]string{knownH2specFailures, notForNativeReasons(), h2specRacy} {
		for id := range ids {
			if _, ok := native.cases[id]; !ok {
				stale = append(stale, id+": no such case in h2spec's report")
			}
		}
	}
	t.Logf("native: %s; grpc-go: %s", native.summary(), grpcgo.summary())
	t.Logf("%d cases listed in knownH2specFailures, h2specNotForNative and h2specRacy:\n  %s", len(remainder), strings.Join(remainder, "\n  "))
	if len(better) > 0 {
		t.Logf("%d cases pass on native and fail on grpc-go:\n  %s", len(better), strings.Join(better, "\n  "))
	}
	if len(regressions) > 0 {
		t.Errorf("%d h2spec cases fail on native and are not known to fail on grpc-go too:\n  %s",
			len(regressions), strings.Join(regressions, "\n  "))
	}
	if len(stale) > 0 {
		t.Errorf("%d listed cases no longer fail as listed: take them off knownH2specFailures or h2specNotForNative:\n  %s",
			len(stale), strings.Join(stale, "\n  "))
	}
}

// notForNativeReasons returns h2specNotForNative's reasons by case id.
func notForNativeReasons() map[string]string {
	m := map[string]string{}
	for id, nf := range h2specNotForNative {
		m[id] = nf.reason
	}
	return m
}

// outcome is how an h2spec case ended.
type outcome string

const (
	passed  outcome = "passed"
	skipped outcome = "skipped"
	failed  outcome = "failed"
)

// h2specCase is one case of a report.
type h2specCase struct {
	name    string // h2spec's description
	outcome outcome
	seen    string // what h2spec saw, when it failed
	detail  string // what h2spec saw and expected, when it failed
}

// h2specReport is h2spec's JUnit report, by case id ("http2/5.1/4": the
// fourth case of section 5.1 of the http2 spec, as h2spec numbers them).
type h2specReport struct {
	ids   []string // in the report's order
	cases map[string]h2specCase
}

func (r h2specReport) summary() string {
	n := map[outcome]int{}
	for _, c := range r.cases {
		n[c.outcome]++
	}
	return fmt.Sprintf("%d cases: %d passed, %d skipped, %d failed", len(r.ids), n[passed], n[skipped], n[failed])
}

// parseH2specReport reads h2spec's JUnit report: a testsuite per section,
// with its package (e.g. "http2/5.1") and its cases in order.
func parseH2specReport(b []byte) (h2specReport, error) {
	type message struct {
		Text string `xml:",chardata"`
	}
	var doc struct {
		Suites []struct {
			Package string `xml:"package,attr"`
			Cases   []struct {
				Name    string   `xml:"classname,attr"`
				Skipped *message `xml:"skipped"`
				Error   *message `xml:"error"`
				Failure *message `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return h2specReport{}, fmt.Errorf("conformance: h2spec report: %w", err)
	}
	r := h2specReport{cases: map[string]h2specCase{}}
	for _, s := range doc.Suites {
		for i, c := range s.Cases {
			id := fmt.Sprintf("%s/%d", s.Package, i+1)
			hc := h2specCase{name: c.Name, outcome: passed}
			switch {
			case c.Error != nil:
				hc.outcome, hc.detail = failed, c.Error.Text
			case c.Failure != nil:
				hc.outcome, hc.detail = failed, c.Failure.Text
			case c.Skipped != nil:
				hc.outcome = skipped
			}
			hc.seen, hc.detail = failureDetail(hc.detail)
			r.ids = append(r.ids, id)
			r.cases[id] = hc
		}
	}
	return r, nil
}

// failureDetail reads h2spec's failure text, the frames it would have
// accepted a line each and then what it saw, and returns what it saw and
// the whole on one line.
func failureDetail(text string) (seen, detail string) {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "", ""
	}
	seen = lines[len(lines)-1]
	if len(lines) == 1 {
		return seen, seen
	}
	return seen, fmt.Sprintf("%s, want %s", seen, strings.Join(lines[:len(lines)-1], " or "))
}
