package rlqs

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// kindNames name the kinds of a pooled charge in the debug log.
var kindNames = [...]string{chargeSlot: "slot", chargeLast: "last", chargeRead: "read"}

// logCharge logs, at debug level, an answered call for e of kind that
// charged c, keeping rate keep (demandScale units), made at now and
// answered after took: what it wrote, and the fleet's demand it read.
// e.mu held.
func (p *pool) logCharge(e *entry, kind int, c service.QuotaCharge, keep int64, now time.Time, took time.Duration) {
	log := p.s.o.Logger
	if !log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	st := &e.state
	var adj, deficit [3]float64
	for i := range adj {
		switch a := c.Demand[i]; a {
		case service.MeterReset:
			adj[i] = -1 // reset
		default:
			adj[i] = float64(a) / float64(demandScale)
		}
		if st.q.Metered {
			deficit[i] = float64(tokenbucket.MaxMillitokens-st.q.Demand[i]) / float64(demandScale)
		}
	}
	var remaining []float64
	for _, l := range st.q.Limits {
		remaining = append(remaining, float64(l.Remaining)/float64(tokenbucket.PerToken))
	}
	log.WithFields(logrus.Fields{
		"bucket": e.domain, "kind": kindNames[kind], "allowed": c.Allowed, "keep": float64(keep) / float64(demandScale),
		"slot": slotOf(now), "epoch": epochOf(now), "offset_ms": now.Sub(time.Unix(0, slotOf(now)*int64(reportInterval))).Milliseconds(),
		"took_ms": took.Milliseconds(), "adjust": adj, "deficits": deficit, "fleet": st.fleet, "mine": st.mine,
		"others": st.others, "local": e.localRate(), "remaining": remaining, "external": st.external,
	}).Debug("rlqs charge")
}
