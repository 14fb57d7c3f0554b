package outboxcli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox"
)

// tracing sets up span export from the standard OpenTelemetry environment
// variables, or returns a nil provider (the relay then makes no spans) when
// they do not ask for it:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: off;
//   - OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint set
//     (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used as is, or
//     OTEL_EXPORTER_OTLP_ENDPOINT, to which /v1/traces is added): OTLP over
//     HTTP with protobuf; the endpoint defaults to http://localhost:4318;
//   - anything else is a configuration error, as is an OTLP protocol other
//     than http/protobuf.
//
// The exporter, the batch span processor and the sampler read their other
// variables themselves (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE, OTEL_BSP_*, OTEL_TRACES_SAMPLER...), as do the resource
// attributes (OTEL_RESOURCE_ATTRIBUTES). The returned stop flushes the spans
// still buffered.
func (c *cli) tracing(ctx context.Context, log *slog.Logger) (trace.TracerProvider, func(), error) {
	off := func() {}
	if strings.EqualFold(c.getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, off, nil
	}
	endpoint := c.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if base := c.getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); endpoint == "" && base != "" {
		endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	switch exp := strings.ToLower(strings.TrimSpace(c.getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return nil, off, nil
	case "":
		if endpoint == "" {
			return nil, off, nil
		}
	case "otlp":
	default:
		return nil, off, usageErr("OTEL_TRACES_EXPORTER=%q: outbox exports spans with otlp only (or none)", exp)
	}
	proto := c.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = c.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, off, usageErr("OTEL_EXPORTER_OTLP_PROTOCOL=%q: outbox exports spans over http/protobuf only", proto)
	}
	var opts []otlptracehttp.Option
	shown := "http://localhost:4318/v1/traces"
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, off, usageErr("OTLP endpoint %q: want a URL such as http://collector:4318", endpoint)
		}
		c.red.addDSN(endpoint)
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		shown = u.Redacted()
	}
	exporter, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, off, usageErr("OTLP exporter: %v", err)
	}
	service := c.getenv("OTEL_SERVICE_NAME")
	if service == "" {
		service = "outbox-relay"
	}
	// Later sources win: the environment's attributes over the defaults,
	// OTEL_SERVICE_NAME over both.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "outbox-relay"), attribute.String("service.version", Version().Version)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		log.Warn("tracing: some resource attributes are ignored", "err", err)
	}
	if c.getenv("OTEL_SERVICE_NAME") != "" || res == nil {
		res, _ = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", service)))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	log.Info("tracing: exporting spans over OTLP", "endpoint", shown)
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans not flushed at exit", "err", fmt.Sprint(err))
		}
	}, nil
}

// withTracer sets the relay's TracerProvider when tracing is on.
func withTracer(cfg outbox.RelayConfig, tp trace.TracerProvider) outbox.RelayConfig {
	if tp != nil {
		cfg.TracerProvider = tp
	}
	return cfg
}
