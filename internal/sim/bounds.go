package main

import "fmt"

// Bounds are what a scenario must hold (docs/scale.md).
type Bounds struct {
	// Low and High bound admitted ÷ allowed in every window from Settle.
	Low, High float64
	// MaxWCU bounds write units per decision from Settle (0: none).
	MaxWCU float64
	// NoThrottles: no call throttled from Settle (every partition within its
	// capacity once the sharding settled).
	NoThrottles bool
	// Tenants: every tenant within its limit from Settle, and at least
	// TenantLow of it where its demand exceeds it (0: not checked).
	TenantLow float64
	// MaxRun bounds admitted over the whole run ÷ allowed (0: none).
	MaxRun float64
}

// highSlack is what admitted ÷ allowed may pass High by in a window,
// besides the tokens the bucket held as the window began (a window's
// allowed counts only the refill; the check adds what the first tenant's
// bucket held): decisions count in the window they were asked in, and
// take their tokens a write's latency later.
const highSlack = 0.001

// check returns how r broke b, one line a breach.
func (r *run) check(b Bounds) []string {
	var out []string
	var asked, admitted int64
	var wcu, allowed float64
	var held int64 // at the window's start
	for _, rw := range r.rows() {
		admitted += rw.admitted
		allowed += rw.allowed
		carried := held
		held = rw.held
		if rw.from < r.sc.Settle {
			continue
		}
		asked += rw.asked
		wcu += rw.wcu
		q := ratio(float64(rw.admitted), rw.allowed)
		if over := ratio(float64(rw.admitted-carried), rw.allowed); b.High > 0 && (q < b.Low || over > b.High+highSlack) {
			out = append(out, fmt.Sprintf("window %v–%v: admitted %d of %.0f allowed (%.4f; %d held as it began), want [%.2f, %.2f]", rw.from, rw.to, rw.admitted, rw.allowed, q, carried, b.Low, b.High))
		}
		if b.NoThrottles && rw.throttled > 0 {
			out = append(out, fmt.Sprintf("window %v–%v: %d calls throttled, want none once sharded", rw.from, rw.to, rw.throttled))
		}
	}
	if q := ratio(wcu, float64(asked)); b.MaxWCU > 0 && q > b.MaxWCU {
		out = append(out, fmt.Sprintf("%.5f write units per decision from %v, want at most %v", q, r.sc.Settle, b.MaxWCU))
	}
	if q := ratio(float64(admitted), allowed); b.MaxRun > 0 && q > b.MaxRun {
		out = append(out, fmt.Sprintf("admitted %d over the run, %.3f× the %.0f allowed, want at most %v×", admitted, q, allowed, b.MaxRun))
	}
	if b.TenantLow > 0 {
		out = append(out, r.checkTenants(b.TenantLow)...)
	}
	return out
}

// checkTenants holds every tenant to its limit from Settle, and to at
// least low of it where its demand exceeded it by a tenth (a tenant asked
// just about its limit is short by the randomness of its arrivals).
func (r *run) checkTenants(low float64) []string {
	var out []string
	span := (r.sc.Duration - r.sc.Settle).Seconds()
	limit := r.sc.Limit * span
	for i := range r.sc.Tenants {
		got := float64(r.st.tAdmitted[i].Load())
		if got > limit+r.sc.Burst {
			out = append(out, fmt.Sprintf("tenant %d admitted %.0f from %v, over its limit of %.0f (+ a burst)", i, got, r.sc.Settle, limit))
		}
		demand := r.sc.Demand * r.tenantDemand(i) * span
		if demand > 1.1*limit && got < low*limit {
			out = append(out, fmt.Sprintf("tenant %d (demand %.0f/s) admitted %.0f from %v, under %.2f of its limit of %.0f", i, demand/span, got, r.sc.Settle, low, limit))
		}
	}
	return out
}

// bounds are each named scenario's; the calibrations have none.
var bounds = map[string]Bounds{
	"hot":       {Low: 0.99, High: 1.0, MaxWCU: 0.01, NoThrottles: true},
	"joinleave": {Low: 0.99, High: 1.0, MaxWCU: 0.01, NoThrottles: true},
	"burst":     {Low: 0.99, High: 1.0, MaxWCU: 0.01},
	"zipf":      {TenantLow: 0.97},
	"throttle":  {MaxRun: 1.2},
}
