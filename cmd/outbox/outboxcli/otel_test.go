package outboxcli

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pgoutbox/outbox"
)

// otlpReceiver is an OTLP/HTTP trace endpoint that keeps the spans it is sent.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func (rcv *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces, application/x-protobuf", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rcv.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				rcv.services = append(rcv.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			rcv.spans = append(rcv.spans, ss.Spans...)
		}
	}
	rcv.mu.Unlock()
	b, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, a relayed event produces a producer
// span, exported over OTLP/HTTP, in the trace its writer started.
func TestRelayExportsSpans(t *testing.T) {
	f := setup(t)
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	var id []byte
	err := pgx.BeginFunc(testCtx(t), f.pool, func(tx pgx.Tx) error {
		ids, err := f.writer.Write(testCtx(t), tx, outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.traced",
			Payload: []byte(`{}`), Headers: map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
		if err == nil {
			id = ids[0][:]
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	vars["OTEL_EXPORTER_OTLP_ENDPOINT"] = srv.URL
	vars["OTEL_SERVICE_NAME"] = "relay-under-test"
	r := startRelay(t, io.Discard, vars, "--broker", "stdout:", "--poll-interval", "20ms")
	r.stderr.waitFor(t, `"msg":"tracing: exporting spans over OTLP"`)
	eventually(t, "the event published", func() bool { return f.count("processed_at IS NOT NULL") == 1 })
	// Stopping flushes the batch span processor.
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, r.stderr.String())
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var found bool
	for _, s := range rcv.spans {
		if hex.EncodeToString(s.TraceId) == traceID && s.Kind == tracepb.Span_SPAN_KIND_PRODUCER && strings.HasPrefix(s.Name, "publish") {
			found = true
		}
	}
	if !found {
		t.Errorf("no producer span in trace %s among %d exported spans (event %x)", traceID, len(rcv.spans), id)
	}
	if len(rcv.services) == 0 || rcv.services[0] != "relay-under-test" {
		t.Errorf("service.name %q, want relay-under-test", rcv.services)
	}
}

// Tracing stays off unless asked for, and a configuration it cannot honour
// is a usage error.
func TestTracingConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		on   bool
		fail string
	}{
		{map[string]string{}, false, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "otlp only"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "http/protobuf only"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, false, "want a URL"},
	} {
		cl := newCLI(io.Discard, io.Discard, env(c.env))
		tp, stop, err := cl.tracing(context.Background(), discardLogger())
		stop()
		switch {
		case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)):
			t.Errorf("%v: error %v, want %q", c.env, err, c.fail)
		case c.fail == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.fail == "" && (tp != nil) != c.on:
			t.Errorf("%v: tracing on = %v, want %v", c.env, tp != nil, c.on)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
