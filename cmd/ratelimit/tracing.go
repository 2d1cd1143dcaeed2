package main

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/tracing"
)

// openTracing returns the trace provider TRACING_ENABLED asks for, or nil.
func openTracing(ctx context.Context, s config.Settings, log *logrus.Entry) (*tracing.Provider, error) {
	if !s.TracingEnabled {
		return nil, nil
	}
	p, err := tracing.New(ctx, tracing.Options{
		Protocol:          s.TracingExporterProtocol,
		ServiceName:       s.TracingServiceName,
		ServiceNamespace:  s.TracingServiceNamespace,
		ServiceInstanceID: s.TracingServiceInstanceID,
		SamplingRate:      s.TracingSamplingRate,
	})
	if err != nil {
		return nil, err
	}
	log.WithFields(logrus.Fields{
		"protocol": s.TracingExporterProtocol, "service_name": s.TracingServiceName,
		"service_namespace": s.TracingServiceNamespace, "service_instance_id": p.InstanceID(),
		"sampling_rate": s.TracingSamplingRate,
	}).Info("tracing to OTLP")
	return p, nil
}
