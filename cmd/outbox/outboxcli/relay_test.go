package outboxcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testnats"
	"github.com/pgoutbox/outbox/jsonl"
)

// TestRelayFlagsBindRelayConfigFields: each relay flag that names a
// RelayConfig field stores its value in that very field, so the library's
// *outbox.ConfigError about the field is reported against the flag.
func TestRelayFlagsBindRelayConfigFields(t *testing.T) {
	t.Parallel()
	var s relaySettings
	cfg := reflect.ValueOf(&s.cfg).Elem()
	for _, st := range s.relayFlags() {
		if st.field == "" {
			continue
		}
		v := cfg
		for _, name := range strings.Split(st.field, ".") {
			if v = v.FieldByName(name); !v.IsValid() {
				break
			}
		}
		if !v.IsValid() {
			t.Errorf("--%s: RelayConfig has no field %s", st.flag, st.field)
			continue
		}
		if v.Addr().Interface() != st.ptr {
			t.Errorf("--%s: does not set RelayConfig.%s", st.flag, st.field)
		}
	}
	for field, want := range map[string]string{
		"OutageBackoff":  "--outage-base/--outage-max: too short",
		"PublishTimeout": "--publish-timeout: too short",
		"Table":          "--table: too short",
		"Registerer":     "outbox: RelayConfig.Registerer: too short",
	} {
		err := flagError(&outbox.ConfigError{Config: "RelayConfig", Field: field, Err: errors.New("too short")})
		if err.Error() != want {
			t.Errorf("%s: flagError = %q, want %q", field, err, want)
		}
	}
}

// streamIDs returns the event ids stored in s: what JetStream acknowledged.
func streamIDs(t *testing.T, s jetstream.Stream) map[uuid.UUID]int {
	t.Helper()
	ctx := testCtx(t)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		id, err := uuid.Parse(m.Header.Get(natsgo.MsgIdHdr))
		if err != nil {
			t.Fatalf("message %d: Nats-Msg-Id: %v", seq, err)
		}
		out[id]++
	}
	return out
}

// The relay command publishes everything, serves its endpoints, and exits 0
// on SIGTERM.
func TestRelayNATS(t *testing.T) {
	f := setup(t)
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)
	ids := f.write("order.created", 300)

	vars := dbEnv()
	vars["OUTBOX_BROKER"] = testnats.URL()
	vars["OUTBOX_SCHEMA"] = f.schema
	vars["OUTBOX_STATS_INTERVAL"] = "50ms"
	r := startRelay(t, &bytes.Buffer{}, vars, "--topic", prefix+".{event_type}", "--batch-size", "50",
		"--http-addr", "127.0.0.1:0", "--poll-interval", "10ms", "--listen", "--ordered")
	addr := r.httpAddr(t)
	eventually(t, "every event published", func() bool { return f.count("processed_at IS NULL") == 0 })

	if code, body := get(t, "http://"+addr+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != 200 || body != "ready\nsource=table active=table\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	var metrics string
	eventually(t, "the pending gauge at 0", func() bool {
		_, metrics = get(t, "http://"+addr+"/metrics")
		return strings.Contains(metrics, "\noutbox_events_pending 0\n")
	})
	for _, want := range []string{"\noutbox_events_published_total 300\n", "\ngo_goroutines ", "\nprocess_open_fds ", "\noutbox_dead_letters 0\n", "\noutbox_replayed_events{state=\"pending\"} 0\n", "\noutbox_events_scheduled 0\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}

	if code := r.stop(t); code != ExitOK {
		t.Fatalf("relay exit %d after SIGTERM; stderr:\n%s", code, r.stderr)
	}
	got := streamIDs(t, stream)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("event %s stored %d times", id, got[id])
		}
	}
	logs := r.stderr.String()
	for _, want := range []string{`"msg":"outbox relay started"`, `"msg":"signal received: finishing the batches in flight"`, `"msg":"outbox relay stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	// Logs are JSON lines when stderr is not a terminal.
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line is not JSON: %s", line)
		}
	}
}

// SIGTERM in the middle of a batch: the relay finishes the batches in flight,
// exits 0, and every row it marked processed is in the stream.
func TestRelaySIGTERMMidBatch(t *testing.T) {
	f := setup(t)
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)
	const n = 3000
	f.write("order.created", n)

	// The first message on the subject, before JetStream acknowledges it, is
	// the moment to "send SIGTERM": its batch is in flight.
	first := make(chan struct{})
	var once sync.Once
	sub, err := nc.Subscribe(prefix+".>", func(*natsgo.Msg) { once.Do(func() { close(first) }) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	vars := dbEnv()
	r := startRelay(t, &bytes.Buffer{}, vars, "--schema", f.schema, "--broker", testnats.URL(),
		"--topic", prefix+".{event_type}", "--batch-size", "500", "--workers", "2")
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatalf("no message published; stderr:\n%s", r.stderr)
	}
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
	}

	processed := f.ids("processed_at IS NOT NULL")
	if len(processed) == 0 || len(processed) == n {
		t.Fatalf("%d of %d rows processed: want the batches in flight finished and the rest left", len(processed), n)
	}
	acked := streamIDs(t, stream)
	for id := range processed {
		if acked[id] == 0 {
			t.Errorf("event %s is marked processed but JetStream never stored it", id)
		}
	}
	if bad := f.count("processed_at IS NULL AND (attempts > 0 OR dead_at IS NOT NULL)"); bad != 0 {
		t.Errorf("%d unprocessed rows had an attempt counted or were dead-lettered by the shutdown", bad)
	}
	t.Logf("%d of %d events published before the relay stopped", len(processed), n)
}

// gateWriter blocks every Write until open is closed, and records lines.
type gateWriter struct {
	entered chan struct{} // closed by the first Write
	open    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	buf     bytes.Buffer
}

func newGateWriter() *gateWriter {
	return &gateWriter{entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// ids returns the event ids of the JSON lines written.
func (g *gateWriter) ids(t *testing.T) map[uuid.UUID]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[uuid.UUID]bool{}
	for _, line := range strings.Split(strings.TrimSpace(g.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var l jsonl.Line
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		out[uuid.MustParse(l.ID)] = true
	}
	return out
}

// SIGTERM while the publisher is blocked mid-batch: the relay waits for the
// batch, marks exactly what the broker confirmed, and exits 0.
func TestRelayFinishesBatchInFlight(t *testing.T) {
	f := setup(t)
	f.write("order.created", 120)
	out := newGateWriter()
	r := startRelay(t, out, dbEnv(), "--schema", f.schema, "--broker", "stdout:", "--workers", "1", "--batch-size", "50")
	<-out.entered // the first message of the first batch is being written
	r.cancel()
	r.stderr.waitFor(t, "signal received")
	if n := f.count("processed_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d rows processed before the broker confirmed anything", n)
	}
	close(out.open)
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
	}
	written, processed := out.ids(t), f.ids("processed_at IS NOT NULL")
	if len(written) != 50 || len(processed) != 50 {
		t.Fatalf("%d events written, %d processed; want the whole batch of 50 and nothing more", len(written), len(processed))
	}
	for id := range processed {
		if !written[id] {
			t.Errorf("event %s processed without being written", id)
		}
	}
}

// A batch that outlives --drain-timeout: exit code 5, and nothing marked.
func TestRelayDrainTimeout(t *testing.T) {
	f := setup(t)
	f.write("order.created", 10)
	out := newGateWriter()
	t.Cleanup(func() { close(out.open) }) // let the abandoned batch end before the schema is dropped
	r := startRelay(t, out, dbEnv(), "--schema", f.schema, "--broker", "stdout:", "--workers", "1",
		"--drain-timeout", "200ms", "--publish-timeout", "5s")
	<-out.entered
	start := time.Now()
	code := r.stop(t)
	if code != ExitDrainTimeout {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitDrainTimeout, r.stderr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("exit after %s with a 200ms drain timeout", d)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "outbox: relay: --drain-timeout 200ms exceeded") {
		t.Errorf("last stderr line: %s", last)
	}
	if n := f.count("processed_at IS NOT NULL"); n != 0 {
		t.Errorf("%d rows marked processed without a confirmation", n)
	}
}

// An unreachable broker does not stop the relay: it reports not ready and
// backs off without counting attempts.
func TestRelayBrokerDown(t *testing.T) {
	f := setup(t)
	f.write("order.created", 5)
	r := startRelay(t, &bytes.Buffer{}, dbEnv(), "--schema", f.schema, "--broker", "nats://127.0.0.1:1",
		"--http-addr", "127.0.0.1:0", "--outage-base", "10ms", "--outage-max", "50ms")
	addr := r.httpAddr(t)
	r.stderr.waitFor(t, `"msg":"broker unavailable, relay backing off; no attempt counted"`)
	code, body := get(t, "http://"+addr+"/readyz")
	if code != 503 || !strings.HasPrefix(body, "not ready: broker") {
		t.Errorf("/readyz with the broker down: %d %q", code, body)
	}
	_, metrics := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(metrics, "\noutbox_broker_unavailable 1\n") {
		t.Errorf("/metrics: outbox_broker_unavailable is not 1")
	}
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
	}
	if n := f.count("attempts > 0 OR processed_at IS NOT NULL"); n != 0 {
		t.Errorf("%d rows touched during the outage", n)
	}
}

// --retention runs the cleanup loop in the relay.
func TestRelayRetention(t *testing.T) {
	f := setup(t)
	f.write("old", 7)
	f.exec(`UPDATE outbox_events SET processed_at = now() - interval '2 hours'`)
	r := startRelay(t, &bytes.Buffer{}, dbEnv(), "--schema", f.schema, "--broker", "stdout:",
		"--retention", "1h", "--cleanup-interval", "1h")
	m := r.stderr.waitFor(t, `"msg":"outbox cleanup","deleted":(\d+)`)
	if n, _ := strconv.Atoi(m[1]); n != 7 {
		t.Errorf("cleanup deleted %d, want 7", n)
	}
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if n := f.count("true"); n != 0 {
		t.Errorf("%d rows left", n)
	}
}

// SIGTERM before the relay has even started is a clean stop.
func TestRelaySignalDuringStartup(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr syncBuffer
	code := runWith(ctx, &stdout, &stderr, dbEnv(), "relay", "--broker", "stdout:", "--schema", f.schema)
	if code != ExitOK {
		t.Errorf("exit %d; stderr:\n%s", code, stderr.String())
	}
}
