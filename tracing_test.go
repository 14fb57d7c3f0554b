package outbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxotel"
	"github.com/pgoutbox/outbox/memory"
)

// TestTraceSpansWritePublishConsume: one trace from the request that wrote
// the event, through the relay's producer span, to the inbox's consumer span
// continued from the message headers and the handler's span inside it.
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

	// The consumer side: the inbox continues the trace from the headers and
	// the handler's own span joins it.
	if _, err := inbox.Migrate(ctx(t), e.pool, inbox.MigrateConfig{Schema: e.schema}); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(e.pool, inbox.Config{Schema: e.schema, Consumer: "shipping", Tracer: inboxotel.New(tp)})
	if err != nil {
		t.Fatal(err)
	}
	delivered, err := inbox.MessageFromHeaders(msg.StandardHeaders(), msg.Payload)
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.Handle(ctx(t), delivered, func(hctx context.Context, tx pgx.Tx) error {
		_, s := tracer.Start(hctx, "ship order")
		s.End()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	req, cons, handler := byName["POST /orders"], byName["process order.created"], byName["ship order"]
	// The producer span is named after its destination when the publisher
	// describes one ("publish order.created").
	var prod tracetest.SpanStub
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "publish") {
			prod = s
		}
	}
	if !prod.SpanContext.IsValid() {
		t.Fatalf("no producer span recorded; spans: %v", names(spans))
	}
	if prod.SpanKind != trace.SpanKindProducer {
		t.Errorf("producer span kind = %v", prod.SpanKind)
	}
	if prod.Parent.SpanID() != req.SpanContext.SpanID() {
		t.Errorf("producer span's parent = %s, want the writing request's span %s", prod.Parent.SpanID(), req.SpanContext.SpanID())
	}
	if cons.SpanKind != trace.SpanKindConsumer || cons.Parent.SpanID() != prod.SpanContext.SpanID() {
		t.Errorf("consumer span (kind %v) parent = %s, want the producer span %s", cons.SpanKind, cons.Parent.SpanID(), prod.SpanContext.SpanID())
	}
	if handler.Parent.SpanID() != cons.SpanContext.SpanID() {
		t.Errorf("handler span's parent = %s, want the inbox's consumer span", handler.Parent.SpanID())
	}
	for _, s := range []tracetest.SpanStub{req, prod, cons, handler} {
		if s.SpanContext.TraceID() != req.SpanContext.TraceID() {
			t.Errorf("span %q is in trace %s, want one trace %s", s.Name, s.SpanContext.TraceID(), req.SpanContext.TraceID())
		}
	}
	attrs := map[string]string{}
	for _, a := range prod.Attributes {
		attrs[string(a.Key)] = a.Value.String()
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
