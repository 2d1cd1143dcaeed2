//go:build redisbench

package redisclient

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cell is one measured run: one client, one concurrency, one key set.
type cell struct {
	client string
	keys   string // "hot" (one tenant's three buckets) or "10000" (tenants at random)
	conc   int
	round  int

	ops         int64
	elapsed     time.Duration
	p50, p99    time.Duration
	cpuPerOp    time.Duration // the client process's user+system CPU per decision
	allocsPerOp float64
	// Redis's side, from INFO after CONFIG RESETSTAT.
	evalshaPerOp  float64 // EVALSHA calls per decision (1: one round trip)
	evalPerOp     float64 // EVAL calls per decision (0: the script stayed loaded)
	bytesInPerOp  float64 // total_net_input_bytes per decision
	callsPerRead  float64 // EVALSHA calls per read from a socket: the pipelines' depth
	serverCPUOp   time.Duration
	instOpsPerSec float64 // instantaneous_ops_per_sec at the end
}

func (c *cell) opsPerSec() float64 { return float64(c.ops) / c.elapsed.Seconds() }

// latencies is a histogram of call latencies: 1 µs buckets below 1 ms, 10 µs
// below 10 ms, 1 ms below 1 s, one bucket beyond.
type latencies [1000 + 900 + 990 + 1]uint32

func (h *latencies) add(d time.Duration) {
	us := d.Microseconds()
	switch {
	case us < 1000:
		h[us]++
	case us < 10_000:
		h[1000+(us-1000)/10]++
	case us < 1_000_000:
		h[1900+(us-10_000)/1000]++
	default:
		h[len(h)-1]++
	}
}

// quantile returns the upper edge of the bucket holding quantile q.
func (h *latencies) quantile(q float64) time.Duration {
	var total uint64
	for _, n := range h {
		total += uint64(n)
	}
	want := uint64(q*float64(total) + 0.5)
	var seen uint64
	for i, n := range h {
		seen += uint64(n)
		if seen >= want && n > 0 {
			switch {
			case i < 1000:
				return time.Duration(i+1) * time.Microsecond
			case i < 1900:
				return time.Duration(1000+(i-1000+1)*10) * time.Microsecond
			default:
				return time.Duration(10_000+(i-1900+1)*1000) * time.Microsecond
			}
		}
	}
	return 0
}

// drive runs conc goroutines calling cl for d and returns the decisions made
// and their latencies. hot picks calls[0] always, else a call at random.
func drive(cl client, calls []call, hot bool, conc int, d time.Duration) (int64, *latencies, error) {
	var stop atomic.Bool
	var ops atomic.Int64
	var firstErr atomic.Value
	hists := make([]latencies, conc)
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range conc {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			h := &hists[g]
			var n int64
			for !stop.Load() {
				c := &calls[0]
				if !hot {
					c = &calls[rng.IntN(len(calls))]
				}
				t0 := time.Now()
				out, err := cl.decide(ctx, c)
				h.add(time.Since(t0))
				if err == nil && (len(out) != 5*levels || out[0] != 1) {
					err = fmt.Errorf("answer %v, want %d integers admitting", out, 5*levels)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					break
				}
				n++
			}
			ops.Add(n)
		}(g)
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, nil, err
	}
	all := &latencies{}
	for i := range hists {
		for j, n := range hists[i] {
			all[j] += n
		}
	}
	return ops.Load(), all, nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure warms cl up for a fifth of d, then measures one cell of d.
func measure(srv *server, cl client, calls []call, c cell, d time.Duration) (cell, error) {
	hot := c.keys == "hot"
	if _, _, err := drive(cl, calls, hot, c.conc, d/5); err != nil {
		return c, err
	}
	if _, err := srv.do("CONFIG", "RESETSTAT"); err != nil {
		return c, err
	}
	before, err := srv.info()
	if err != nil {
		return c, err
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, t0 := cpuTime(), time.Now()
	ops, h, err := drive(cl, calls, hot, c.conc, d)
	c.elapsed, c.cpuPerOp = time.Since(t0), cpuTime()-cpu0
	runtime.ReadMemStats(&m1)
	if err != nil {
		return c, err
	}
	after, err := srv.info()
	if err != nil {
		return c, err
	}
	c.ops = ops
	fops := float64(ops)
	c.p50, c.p99 = h.quantile(0.50), h.quantile(0.99)
	c.cpuPerOp /= time.Duration(ops)
	c.allocsPerOp = float64(m1.Mallocs-m0.Mallocs) / fops
	evalsha := after["cmdstat_evalsha.calls"]
	c.evalshaPerOp = evalsha / fops
	c.evalPerOp = after["cmdstat_eval.calls"] / fops
	c.bytesInPerOp = after["total_net_input_bytes"] / fops
	if reads := after["total_reads_processed"]; reads > 0 {
		c.callsPerRead = evalsha / reads
	}
	serverCPU := after["used_cpu_user"] + after["used_cpu_sys"] - before["used_cpu_user"] - before["used_cpu_sys"]
	c.serverCPUOp = time.Duration(serverCPU / fops * 1e9)
	c.instOpsPerSec = after["instantaneous_ops_per_sec"]
	return c, nil
}
