package nats_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
	"github.com/pgoutbox/outbox/publishertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, setupBroker)
}

// setupBroker gives one sub-test its own stream and a publisher connected
// through its own proxy.
func setupBroker(t *testing.T) *publishertest.Broker {
	// Streams are managed and read over a direct connection; the publisher
	// goes through a proxy so Disconnect can cut it off alone.
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)
	u, err := url.Parse(testnats.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	pnc, err := natsgo.Connect("nats://"+proxy.Addr(),
		natsgo.ReconnectWait(100*time.Millisecond), natsgo.MaxReconnects(-1),
		natsgo.ReconnectJitter(0, 0), natsgo.Timeout(2*time.Second),
		// Resets are what these tests inflict; the default handler would print each.
		natsgo.ErrorHandler(func(*natsgo.Conn, *natsgo.Subscription, error) {}))
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	t.Cleanup(pnc.Close)

	tmpl := prefix + ".{event_type}"
	pub, err := outboxnats.New(pnc, outboxnats.Config{Subject: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	unroutable, err := outboxnats.New(pnc, outboxnats.Config{Subject: "nostream." + prefix + ".{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	return &publishertest.Broker{
		Publisher:      pub,
		Unroutable:     unroutable,
		UnroutableName: "nostream." + prefix + ".order.created",
		RefuseAll:      func(t *testing.T) (outbox.Publisher, func()) { return fullStream(t, nc) },
		MaxPayload:     int(pnc.MaxPayload()) + 1,
		TopicOf:        func(m *outbox.Message) string { return prefix + "." + m.EventType },
		Read:           func(ctx context.Context, n int) ([]publishertest.Received, error) { return readStream(ctx, stream, n) },
		Disconnect: func(t *testing.T) func() {
			proxy.Cut()
			return proxy.Restore
		},
		CloudEvents: &publishertest.CloudEvents{Prefix: "ce-", PercentEncoded: true, ContentType: "Content-Type"},
	}
}

func readStream(ctx context.Context, s jetstream.Stream, n int) ([]publishertest.Received, error) {
	var out []publishertest.Received
	for seq := uint64(1); len(out) < n; {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			time.Sleep(20 * time.Millisecond) // not stored yet
			continue
		}
		seq++
		h := map[string]string{}
		for k := range m.Header {
			h[k] = m.Header.Get(k)
		}
		out = append(out, publishertest.Received{
			Topic: m.Subject, DedupID: m.Header.Get(natsgo.MsgIdHdr), Headers: h, Payload: m.Data,
		})
	}
	return out, nil
}

func TestInvalidSubjectsArePermanent(t *testing.T) {
	t.Parallel()
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".{aggregate_type}.{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ aggType, eventType string }{
		{"order", "*"}, {"order", ">"}, {"", "created"}, {"order", "order created"}, {"order", "a..b"}, {"order", "tab\there"},
	} {
		m := publishertest.NewMessage("1", `{}`)
		m.AggregateType, m.EventType = bad.aggType, bad.eventType
		err := pub.Publish(context.Background(), m)
		if outbox.Classify(err) != outbox.ClassPermanent || !strings.Contains(err.Error(), "subject") {
			t.Errorf("subject from %q/%q: err = %v, want a permanent error about the subject", bad.aggType, bad.eventType, err)
		}
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d messages stored from invalid subjects", info.State.Msgs)
	}
}

// TestNothingSentAfterTheRelayGaveUp: once ctx is done (the relay's publish
// timeout), the rest of the batch is not sent: those rows are released and
// may be claimed, published and marked again, and a late copy from the
// abandoned batch must not follow them out.
func TestNothingSentAfterTheRelayGaveUp(t *testing.T) {
	t.Parallel()
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := []*outbox.Message{publishertest.NewMessage("1", `{}`), publishertest.NewMessage("2", `{}`)}
	for i, err := range pub.PublishBatch(ctx, msgs) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: err = %v, want context.Canceled", i, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d messages stored from a batch whose context was done", info.State.Msgs)
	}
}

// fullStream returns a publisher to a stream holding its max_msgs with
// discard new, which refuses every message ("maximum messages exceeded",
// err_code 10077), and a function lifting the limit.
func fullStream(t *testing.T, nc *natsgo.Conn) (outbox.Publisher, func()) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, prefix := testnats.Stream(t, nc)
	ctx := context.Background()
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 1, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, prefix+".filler", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	return pub, func() {
		cfg.MaxMsgs = -1
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Errorf("lift the stream's limit: %v", err)
		}
	}
}
