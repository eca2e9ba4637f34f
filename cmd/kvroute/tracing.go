package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// startTracing builds the OpenTelemetry tracer that exports spans over OTLP/HTTP to endpoint (a URL such as
// http://otel-collector:4318; the SDK's OTEL_* variables, OTEL_TRACES_SAMPLER among them, apply). It returns
// the tracer and the provider's shutdown, which flushes what is batched.
func startTracing(endpoint, service string) (trace.Tracer, func(context.Context) error, error) {
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("--otlp-traces-endpoint: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.String("service.version", version()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp.Tracer("github.com/kvroute/kvroute/frontend"), tp.Shutdown, nil
}
