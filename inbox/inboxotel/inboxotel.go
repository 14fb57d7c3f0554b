// Package inboxotel traces the consumer's side with OpenTelemetry: set
// inbox.Config.Tracer to New(tp) and Handle wraps each message in a consumer
// span that continues the trace the relay's producer span sent in the
// message headers (W3C traceparent, tracestate), so the handler's own spans
// (it gets the span in its ctx) join the trace that began where the event
// was written.
//
// It is a package of its own so that package inbox, and a consumer that
// does not trace, link no OpenTelemetry.
package inboxotel

import (
	"cmp"
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox/inbox"
)

var traceContext = propagation.TraceContext{}

// New returns an inbox.Tracer whose spans tp creates; a nil tp means the
// OpenTelemetry global provider (a no-op unless one is installed, which
// still hands the handler the sender's span context).
func New(tp trace.TracerProvider) inbox.Tracer {
	tp = cmp.Or(tp, otel.GetTracerProvider())
	return tracer{tp.Tracer("github.com/pgoutbox/outbox/inbox")}
}

type tracer struct{ t trace.Tracer }

// Start starts the consumer span "process <event type>", a child of the
// message's traceparent when it carries one.
func (t tracer) Start(ctx context.Context, consumer string, msg inbox.Message) (context.Context, func(inbox.Result, error)) {
	if msg.Header("traceparent") != "" {
		ctx = traceContext.Extract(ctx, headerCarrier{msg})
	}
	ctx, span := t.t.Start(ctx, "process "+msg.EventType, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.message.id", msg.ID.String()),
			attribute.String("messaging.consumer.group.name", consumer),
			attribute.String("outbox.event_type", msg.EventType),
			attribute.String("outbox.aggregate_type", msg.AggregateType),
			attribute.String("outbox.aggregate_id", msg.AggregateID),
		))
	return ctx, func(res inbox.Result, err error) {
		span.SetAttributes(attribute.Bool("inbox.duplicate", res.Duplicate))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// headerCarrier reads the trace context from a message's headers, whatever
// their case (HTTP canonicalizes names, NATS and Kafka do not).
type headerCarrier struct{ msg inbox.Message }

func (c headerCarrier) Get(key string) string { return c.msg.Header(key) }
func (c headerCarrier) Set(string, string)    {}
func (c headerCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }
