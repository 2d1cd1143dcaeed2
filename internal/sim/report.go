package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// row is one window of the report.
type row struct {
	from, to                     time.Duration
	asked, admitted, local, errs int64
	allowed                      float64 // what the limits allowed the tenants asked of, in the window
	writes                       int64
	wcu, rcu                     float64
	throttled                    int
	shards, partitions           int
	held                         int64 // whole tokens the first tenant's bucket held at the window's end
}

// rows sums the run's seconds into windows of sc.Window.
func (r *run) rows() []row {
	var out []row
	w := int(r.sc.Window / time.Second)
	secs := int(r.sc.Duration / time.Second)
	for from := 0; from < secs; from += w {
		rw := row{from: time.Duration(from) * time.Second, to: time.Duration(min(from+w, secs)) * time.Second}
		for i := from; i < min(from+w, secs); i++ {
			s := &r.st.secs[i]
			rw.asked += s.asked.Load()
			rw.admitted += s.admitted.Load()
			rw.local += s.local.Load()
			rw.errs += s.errs.Load()
			rw.writes += s.writes.Load()
			rw.wcu += s.wcu
			rw.rcu += s.rcu
			rw.throttled += s.throttled
			rw.shards, rw.partitions, rw.held = s.shards, s.partitions, s.held
		}
		rw.allowed = r.allowed(rw.from, rw.to)
		out = append(out, rw)
	}
	return out
}

// allowed is what the limits allow over [from, to): each tenant with
// demand its refill over the span, and its burst in the first window.
func (r *run) allowed(from, to time.Duration) float64 {
	per := r.sc.Limit * (to - from).Seconds()
	if from == 0 {
		per += r.sc.Burst
	}
	if r.sc.Tenants == 1 {
		return per
	}
	// Tenants asked for less than their limit are allowed what they asked
	// (about): the report's allowed is the sum of min(demand, limit).
	total := 0.0
	for i := range r.sc.Tenants {
		total += min(per, r.sc.Demand*r.tenantDemand(i)*(to-from).Seconds())
	}
	return total
}

// report prints the run's table to w.
func (r *run) report(w io.Writer, wall time.Duration) {
	sc := r.sc
	fmt.Fprintf(w, "scenario %s: %s\n", sc.Name, sc.About)
	fmt.Fprintf(w, "%d simulated seconds in %v of wall time; prices of %s (%s): $%.3f per million write units, $%.3f per million read units\n",
		int(sc.Duration/time.Second), wall.Round(time.Millisecond), Prices.Date, Prices.Region, Prices.WriteUnit, Prices.ReadUnit)
	if sc.Callers > 0 {
		fmt.Fprintf(w, "%d replicas × %d callers, %d tenants of %.0f a second each", sc.Replicas, sc.Callers, sc.Tenants, sc.Limit)
	} else {
		fmt.Fprintf(w, "%d replicas, %.0f decisions a second of demand over %d tenants of %.0f a second each", sc.Replicas, sc.Demand, sc.Tenants, sc.Limit)
	}
	for _, c := range sc.Changes {
		fmt.Fprintf(w, "; at %v +%d replicas, −%d (the oldest)", c.At, c.Join, c.Leave)
	}
	fmt.Fprintln(w)
	if sc.WarmWrites > 0 || sc.WarmReads > 0 {
		fmt.Fprintf(w, "table pre-warmed (CreateTable's WarmThroughput) to %.0f write and %.0f read units a second (zero: a new table's 4,000 and 12,000)\n\n", sc.WarmWrites, sc.WarmReads)
	} else {
		fmt.Fprintf(w, "a new on-demand table: warm throughput of 4,000 write and 12,000 read units a second\n\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "window\tasked/s\tadmitted/s\tallowed/s\tadmitted÷allowed\tlocal/s\terrors\twrites/decision\tWCU/decision\tRCU/decision\tthrottles\tshards\theld at end\tpartitions\t$/M decisions\t")
	var asked int64
	var wcu, rcu float64
	for _, rw := range r.rows() {
		d := (rw.to - rw.from).Seconds()
		asked += rw.asked
		wcu += rw.wcu
		rcu += rw.rcu
		fmt.Fprintf(tw, "%v–%v\t%.0f\t%.0f\t%.0f\t%.4f\t%.0f\t%d\t%.5f\t%.5f\t%.5f\t%d\t%d\t%d\t%d\t%.4f\t\n",
			rw.from, rw.to, float64(rw.asked)/d, float64(rw.admitted)/d, rw.allowed/d, ratio(float64(rw.admitted), rw.allowed), float64(rw.local)/d, rw.errs,
			ratio(float64(rw.writes), float64(rw.asked)), ratio(rw.wcu, float64(rw.asked)), ratio(rw.rcu, float64(rw.asked)), rw.throttled, rw.shards, rw.held, rw.partitions,
			Prices.perMillion(rw.wcu, rw.rcu, rw.asked))
	}
	_ = tw.Flush()
	var admitted int64
	for _, rw := range r.rows() {
		admitted += rw.admitted
	}
	fmt.Fprintf(w, "\ndecision latency p50 %v, p99 %v; %d shard doublings; whole run: %d decisions, %d admitted, %d UpdateItem (%.5f per decision), %.5f WCU and %.5f RCU per decision, $%.4f per million decisions\n",
		r.st.quantile(0.5), r.st.quantile(0.99), r.st.doublings.Load(), asked, admitted, r.fake.Calls("UpdateItem"), ratio(float64(r.fake.Calls("UpdateItem")), float64(asked)),
		ratio(wcu, float64(asked)), ratio(rcu, float64(asked)), Prices.perMillion(wcu, rcu, asked))
	r.st.mu.Lock()
	fmt.Fprintf(w, "refusals from the rejection cache %d; contended %v; %d writes landed unanswered (within the budget: their decisions refused or failed, what they took spent)\n",
		r.st.cacheHits.Load(), r.st.contended, r.fake.Consumed().Unanswered)
	for _, l := range r.st.failedLines() {
		fmt.Fprintln(w, l)
	}
	for _, d := range r.st.doubled {
		fmt.Fprintf(w, "doubling at %v by replica %d after %d of its writes in the second before\n", d.at.Round(time.Millisecond), d.replica, d.writes)
	}
	r.st.mu.Unlock()
}

// ratio is a/b, 0 when b is.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
