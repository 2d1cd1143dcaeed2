package main

import (
	"github.com/dynalimit/dynalimit/internal/rlqs"
	"github.com/dynalimit/dynalimit/internal/service"
)

// newRLQS is the Rate Limit Quota Service over svc, which charges its
// reports to the same store and configuration as ShouldRateLimit, served
// on the same gRPC server and port.
func newRLQS(p parts, svc *service.Service) *rlqs.Server {
	s := p.settings
	o := rlqs.Options{
		Config:         p.config.Current,
		Charger:        svc,
		TTL:            s.RLQSAssignmentTTL,
		AbandonAfter:   s.RLQSAbandonAfter,
		MaxBuckets:     s.RLQSMaxBucketsPerStream,
		MaxStreamBytes: s.RLQSMaxStreamBytes,
		MaxKeys:        s.RequestMaxEntries,
		Logger:         p.log("rlqs"),
	}
	if p.rlqsMetrics != nil {
		o.Observer = p.rlqsMetrics
	}
	return rlqs.New(o)
}
