package testutil

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// probeInterval is how often a Prober times its call.
const probeInterval = 100 * time.Millisecond

// probeKeep is how many samples a Prober keeps: the last ten minutes.
const probeKeep = int(10 * time.Minute / probeInterval)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

// A Prober times a cheap call to one process every 100 ms (a health check
// of the binary, a ListTables of DynamoDB Local, Envoy's /ready) and reads
// the CPU time the process has used, so that a failing test can say which
// process was slow: ours, DynamoDB Local or Envoy. The test binary's own
// prober times how late its timer fires: when that is late too, the
// machine was short of CPU for everyone.
type Prober struct {
	name  string
	pid   func() int
	probe func(context.Context) error
	// expected is what a probe takes at best, taken off each sample.
	expected time.Duration
	stop     chan struct{}
	done     chan struct{}

	mu      sync.Mutex
	samples []probeSample // a ring of the last probeKeep
	next    int
}

// probeSample is one probe: when it started, how long it took, whether it
// failed, and the process's CPU time then (-1 when unknown).
type probeSample struct {
	at     time.Time
	took   time.Duration
	failed bool
	cpu    time.Duration
}

// StartProber starts timing probe, a call to the process called name whose
// id pid returns (0 when none runs), every 100 ms until Stop. A probe gets
// a context of 5 s.
func StartProber(name string, pid func() int, probe func(ctx context.Context) error) *Prober {
	p := newProber(name, pid, probe)
	go p.run()
	return p
}

func newProber(name string, pid func() int, probe func(ctx context.Context) error) *Prober {
	return &Prober{name: name, pid: pid, probe: probe, stop: make(chan struct{}), done: make(chan struct{})}
}

func (p *Prober) run() {
	defer close(p.done)
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := p.probe(ctx)
		cancel()
		p.add(probeSample{at: start, took: max(0, time.Since(start)-p.expected), failed: err != nil, cpu: ProcessCPU(p.pid())})
	}
}

func (p *Prober) add(s probeSample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) < probeKeep {
		p.samples = append(p.samples, s)
		return
	}
	p.samples[p.next] = s
	p.next = (p.next + 1) % probeKeep
}

// Stop stops the probes and waits for the one under way. The samples stay.
func (p *Prober) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// Summary says how the probes since from went: how many, their latency at
// the median, the 99th percentile and the worst, how many failed, and the
// CPU the process used in that time (in cores: 1.0 is one core all along).
func (p *Prober) Summary(from time.Time) string {
	p.mu.Lock()
	var in []probeSample
	for _, s := range p.samples {
		if !s.at.Before(from) {
			in = append(in, s)
		}
	}
	p.mu.Unlock()
	if len(in) == 0 {
		return fmt.Sprintf("%s: no probe", p.name)
	}
	slices.SortFunc(in, func(a, b probeSample) int { return a.at.Compare(b.at) })
	took := make([]time.Duration, len(in))
	failed := 0
	for i, s := range in {
		took[i] = s.took
		if s.failed {
			failed++
		}
	}
	slices.Sort(took)
	q := func(f float64) time.Duration { return took[int(f*float64(len(took)-1))].Round(100 * time.Microsecond) }
	line := fmt.Sprintf("%s: %d probes, p50 %v, p99 %v, max %v, %d failed", p.name, len(in), q(0.5), q(0.99), took[len(took)-1].Round(100*time.Microsecond), failed)
	first, last := in[0], in[len(in)-1]
	if span := last.at.Sub(first.at); first.cpu >= 0 && last.cpu >= first.cpu && span > 0 {
		line += fmt.Sprintf("; CPU %.1f s in %.1f s (%.2f cores)", (last.cpu - first.cpu).Seconds(), span.Seconds(), float64(last.cpu-first.cpu)/float64(span))
	}
	return line
}

// ProcessCPU returns the user and system CPU time process pid has used, or
// -1 when it is unknown.
func ProcessCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

var (
	selfMu    sync.Mutex
	self      *Prober
	selfUsers int
)

// useSelf returns the test binary's own prober, started for its first user
// and stopped when its last one calls the returned func (so that no
// goroutine of it outlives the tests, for goleak). Each probe sleeps 10 ms,
// and what it takes beyond that is how late the binary was scheduled.
func useSelf() (p *Prober, done func()) {
	selfMu.Lock()
	defer selfMu.Unlock()
	if self == nil {
		pid := os.Getpid()
		self = newProber("this test binary (lateness of a 10 ms sleep)", func() int { return pid }, func(context.Context) error {
			time.Sleep(10 * time.Millisecond)
			return nil
		})
		self.expected = 10 * time.Millisecond
		go self.run()
	}
	selfUsers++
	p = self
	return p, func() {
		selfMu.Lock()
		defer selfMu.Unlock()
		if selfUsers--; selfUsers == 0 {
			self.Stop()
			self = nil
		}
	}
}

// HTTPProbe returns a probe that GETs url and fails unless the answer is
// 200.
func HTTPProbe(url string) func(context.Context) error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// slowReports holds, per test, the probers its failure report names.
var slowReports sync.Map // testing.TB → *slowReport

type slowReport struct {
	from    time.Time
	mu      sync.Mutex
	probers []*Prober
}

// ReportSlowOnFailure adds probers to what t logs when it fails: how every
// prober named for t, and the test binary's own, went from t's first call
// to its end. That says which process was slow.
func ReportSlowOnFailure(t testing.TB, probers ...*Prober) {
	t.Helper()
	r := &slowReport{from: time.Now()}
	if got, loaded := slowReports.LoadOrStore(t, r); loaded {
		r = got.(*slowReport)
	} else {
		self, done := useSelf()
		r.probers = []*Prober{self}
		t.Cleanup(func() {
			defer done()
			slowReports.Delete(t)
			if t.Failed() {
				t.Log(r.text())
			}
		})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range probers {
		if !slices.Contains(r.probers, p) {
			r.probers = append(r.probers, p)
		}
	}
}

func (r *slowReport) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("latency of each process during this test, from a probe every 100 ms:\n")
	for _, p := range r.probers {
		b.WriteString("  " + p.Summary(r.from) + "\n")
	}
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.WriteString("  load average: " + strings.TrimSpace(string(load)))
	}
	return b.String()
}
