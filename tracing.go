package outbox

import (
	"cmp"
	"context"
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing follows the W3C Trace Context: at write time the caller's span
// context is stored in the event's headers (traceparent, tracestate); the
// relay starts a producer span per message as a child of it and sends the
// producer span's context in the message headers, so a consumer's span
// continues the same trace. With no TracerProvider configured (the OTel
// global default is a no-op), this costs a context lookup per event.

const instrumentationName = "github.com/pgoutbox/outbox"

// traceContext is used directly rather than the global propagator, so trace
// context is carried even when the application never set one.
var traceContext = propagation.TraceContext{}

// Describer is implemented by publishers that can name their messaging
// system and a message's destination, for the producer spans' attributes
// (messaging.system, messaging.destination.name).
type Describer interface {
	MessagingSystem() string
	Destination(msg *Message) string
}

// withTraceContext returns headers with the span context of ctx injected,
// copying rather than modifying the caller's map. Headers that already carry
// a traceparent are left alone.
func withTraceContext(ctx context.Context, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	if _, ok := headers["traceparent"]; ok {
		return headers
	}
	h := make(map[string]string, len(headers)+2)
	maps.Copy(h, headers)
	traceContext.Inject(ctx, propagation.MapCarrier(h))
	return h
}

type relayTracer struct {
	tracer trace.Tracer
}

func newRelayTracer(tp trace.TracerProvider) *relayTracer {
	tp = cmp.Or(tp, otel.GetTracerProvider())
	return &relayTracer{tracer: tp.Tracer(instrumentationName)}
}

// start begins a producer span for each message, child of the context stored
// at write time, and rewrites the message's trace headers to the new span.
func (rt *relayTracer) start(ctx context.Context, pub Publisher, msgs []*Message) []trace.Span {
	desc, _ := pub.(Describer)
	spans := make([]trace.Span, len(msgs))
	noParent := !trace.SpanContextFromContext(ctx).IsValid()
	for i, m := range msgs {
		parent := ctx
		hasParent := m.Headers["traceparent"] != ""
		if hasParent {
			parent = traceContext.Extract(ctx, propagation.MapCarrier(m.Headers))
		}
		sctx, span := rt.tracer.Start(parent, "publish", trace.WithSpanKind(trace.SpanKindProducer))
		if noParent && !hasParent && !span.SpanContext().IsValid() {
			// Only a no-op provider (none installed) starts a span without
			// a trace id: every span of this batch would be a no-op too.
			for j := i; j < len(msgs); j++ {
				spans[j] = span
			}
			return spans
		}
		if span.IsRecording() { // attributes cost allocations: only for a real tracer
			dest, system := "", ""
			if desc != nil {
				dest, system = desc.Destination(m), desc.MessagingSystem()
				span.SetName("publish " + dest)
			}
			span.SetAttributes(
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.operation.name", "publish"),
				attribute.String("messaging.message.id", m.ID.String()),
				attribute.String("messaging.system", system),
				attribute.String("messaging.destination.name", dest),
				attribute.String("outbox.event_type", m.EventType),
				attribute.String("outbox.aggregate_type", m.AggregateType),
				attribute.String("outbox.aggregate_id", m.AggregateID),
				attribute.Int("outbox.attempt", m.Attempt),
			)
		}
		spans[i] = span
		if span.IsRecording() {
			h := make(map[string]string, len(m.Headers)+2)
			maps.Copy(h, m.Headers)
			delete(h, "tracestate")
			traceContext.Inject(sctx, propagation.MapCarrier(h))
			m.Headers = h
		}
	}
	return spans
}

func endSpans(spans []trace.Span, errs []error) {
	for i, s := range spans {
		if errs[i] != nil {
			s.RecordError(errs[i])
			s.SetStatus(codes.Error, Classify(errs[i]).String())
		}
		s.End()
	}
}
