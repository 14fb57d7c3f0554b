package inbox

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The relay sends the producer span's W3C trace context in the message
// headers (traceparent, tracestate). Handle continues that trace with a
// consumer span around the inbox transaction, so the handler's own spans (it
// gets the span in its ctx) join the trace that began where the event was
// written. With no TracerProvider installed this costs nothing measurable.

var traceContext = propagation.TraceContext{}

func (c *core) startSpan(ctx context.Context, msg Message) (context.Context, trace.Span) {
	if msg.Headers["traceparent"] != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier(msg.Headers))
	}
	return c.tracer.Start(ctx, "process "+msg.EventType, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.message.id", msg.ID.String()),
			attribute.String("messaging.consumer.group.name", c.consumer),
			attribute.String("outbox.event_type", msg.EventType),
			attribute.String("outbox.aggregate_type", msg.AggregateType),
			attribute.String("outbox.aggregate_id", msg.AggregateID),
		))
}

func endSpan(span trace.Span, res Result, err error) {
	span.SetAttributes(attribute.Bool("inbox.duplicate", res.Duplicate))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func tracerFrom(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer("github.com/pgoutbox/outbox/inbox")
}
