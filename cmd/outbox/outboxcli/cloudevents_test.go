package outboxcli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"

	"github.com/pgoutbox/outbox/internal/testnats"
)

// outbox relay --envelope cloudevents sends CloudEvents with the source
// --cloudevents-source names.
func TestRelayCloudEvents(t *testing.T) {
	f := setup(t)
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)
	ids := f.write("order.created", 5)
	vars := dbEnv()
	vars["OUTBOX_BROKER"] = testnats.URL()
	vars["OUTBOX_SCHEMA"] = f.schema
	r := startRelay(t, &bytes.Buffer{}, vars, "--topic", prefix+".{event_type}", "--poll-interval", "10ms",
		"--envelope", "cloudevents", "--cloudevents-source", "/shop/orders")
	eventually(t, "every event published", func() bool { return f.count("processed_at IS NULL") == 0 })
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("relay exit %d; stderr:\n%s", code, r.stderr)
	}
	want := map[uuid.UUID]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for seq := uint64(1); seq <= uint64(len(ids)); seq++ {
		m, err := stream.GetMsg(testCtx(t), seq)
		if err != nil {
			t.Fatal(err)
		}
		id, err := uuid.Parse(m.Header.Get("ce-id"))
		if err != nil || !want[id] || m.Header.Get(natsgo.MsgIdHdr) != id.String() {
			t.Errorf("message %d: ce-id %q, Nats-Msg-Id %q; want one of the events' ids", seq, m.Header.Get("ce-id"), m.Header.Get(natsgo.MsgIdHdr))
		}
		if m.Header.Get("ce-source") != "/shop/orders" || m.Header.Get("ce-type") != "order.created" || m.Header.Get("outbox-event-id") != "" {
			t.Errorf("message %d: headers %v", seq, m.Header)
		}
	}
	if !strings.Contains(r.stderr.String(), `"envelope":"cloudevents"`) {
		t.Errorf("the start line does not name the envelope:\n%s", r.stderr)
	}
}

func TestRelayCloudEventsUsage(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"--envelope json":                                 `--envelope: "json" is not an envelope (want outbox, cloudevents or cloudevents-structured)`,
		"--cloudevents-source /x":                         `--cloudevents-source: "/x": set without --envelope cloudevents or cloudevents-structured`,
		"--envelope cloudevents --cloudevents-source %zz": "--cloudevents-source:",
	} {
		r := run(t, map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test"}, append([]string{"relay", "--broker", "stdout:"}, strings.Fields(args)...)...)
		wantExit(t, r, ExitUsage)
		if !strings.Contains(r.stderr, want) {
			t.Errorf("%s: stderr %q, want %q", args, r.stderr, want)
		}
	}
}
