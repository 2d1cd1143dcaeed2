package adminpage

import (
	"sort"
)

// fleetView is the page's health section, from the service's metrics.
type fleetView struct {
	Known     bool
	Size      string
	Degraded  string
	Local     string
	SettleUps []settleUp
}

// settleUp is the count of one result of the settle-ups.
type settleUp struct{ Result, Count string }

// view view is everything the page shows.
type view struct {
	Now, Store, Host string
	Bucket           bucketView
	Usage            usageView
	Fleet            fleetView
	Config           string
}

// fleet is the fleet's health as this replica's metrics tell it.
func (p *Page) fleet() fleetView {
	if p.o.Gatherer == nil {
		return fleetView{}
	}
	v := fleetView{Known: true, Size: num(p.gauge("ratelimit_fleet_size")), Degraded: num(p.gauge("ratelimit_degraded_items")), Local: num(p.gauge("ratelimit_local_items"))}
	if v.Size == "0" {
		v.Size = "1 (this replica: the store keeps no fleet)"
	}
	results := map[string]float64{}
	p.each("ratelimit_settle_ups_total", func(labels map[string]string, value float64) { results[labels["result"]] += value })
	for r, n := range results {
		v.SettleUps = append(v.SettleUps, settleUp{r, num(n)})
	}
	sort.Slice(v.SettleUps, func(i, j int) bool { return v.SettleUps[i].Result < v.SettleUps[j].Result })
	return v
}

// gauge is the sum of the samples of the metric name (0 when none).
func (p *Page) gauge(name string) float64 {
	total := 0.0
	p.each(name, func(_ map[string]string, v float64) { total += v })
	return total
}

// each calls f with the labels and value of every sample of name.
func (p *Page) each(name string, f func(labels map[string]string, value float64)) {
	if p.o.Gatherer == nil {
		return
	}
	families, err := p.o.Gatherer.Gather()
	if err != nil {
		return
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				f(labels, m.GetGauge().GetValue())
			case m.GetCounter() != nil:
				f(labels, m.GetCounter().GetValue())
			}
		}
	}
}
