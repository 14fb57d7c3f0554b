package outbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// TestTraceSpansWritePublishConsume: one trace from the request that wrote
// the event, through the relay's producer span, to the consumer's span
// continued from the message headers.
func TestTraceSpansWritePublishConsume(t *testing.T) {
	e := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("app")

	// The application handles a request inside a span and writes an event.
	reqCtx, reqSpan := tracer.Start(ctx(t), "POST /orders")
	err := pgx.BeginFunc(reqCtx, e.pool, func(tx pgx.Tx) error {
		_, err := e.writer.Write(reqCtx, tx, event("42", 1))
		return err
	})
	reqSpan.End()
	if err != nil {
		t.Fatal(err)
	}

	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{TracerProvider: tp})
	if _, err := r.ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	msg := pub.Messages()[0]

	// The consumer continues the trace from the message headers.
	consumerCtx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(msg.Headers))
	_, consumeSpan := tracer.Start(consumerCtx, "consume order.created", trace.WithSpanKind(trace.SpanKindConsumer))
	consumeSpan.End()

	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	req, prod, cons := byName["POST /orders"], byName["publish"], byName["consume order.created"]
	if !prod.SpanContext.IsValid() {
		t.Fatalf("no producer span recorded; spans: %v", names(spans))
	}
	if prod.SpanKind != trace.SpanKindProducer {
		t.Errorf("producer span kind = %v", prod.SpanKind)
	}
	if prod.Parent.SpanID() != req.SpanContext.SpanID() {
		t.Errorf("producer span's parent = %s, want the writing request's span %s", prod.Parent.SpanID(), req.SpanContext.SpanID())
	}
	if cons.Parent.SpanID() != prod.SpanContext.SpanID() {
		t.Errorf("consumer span's parent = %s, want the producer span %s", cons.Parent.SpanID(), prod.SpanContext.SpanID())
	}
	for _, s := range []tracetest.SpanStub{req, prod, cons} {
		if s.SpanContext.TraceID() != req.SpanContext.TraceID() {
			t.Errorf("span %q is in trace %s, want one trace %s", s.Name, s.SpanContext.TraceID(), req.SpanContext.TraceID())
		}
	}
	attrs := map[string]string{}
	for _, a := range prod.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["messaging.message.id"] != msg.ID.String() || attrs["messaging.operation.type"] != "send" {
		t.Errorf("producer attributes = %v", attrs)
	}
}

func TestNoSpanNoTraceHeaders(t *testing.T) {
	e := setup(t)
	e.write(1)
	var h *string
	if err := e.pool.QueryRow(ctx(t), `SELECT headers::text FROM outbox_events`).Scan(&h); err != nil {
		t.Fatal(err)
	}
	if h != nil {
		t.Errorf("headers = %s without any span in the context, want NULL", *h)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
