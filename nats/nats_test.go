package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
	"github.com/pgoutbox/outbox/publishertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		nc := testnats.Conn(t)
		stream, prefix := testnats.Stream(t, nc)
		tmpl := prefix + ".{event_type}"
		pub, err := outboxnats.New(nc, outboxnats.Config{Subject: tmpl})
		if err != nil {
			t.Fatal(err)
		}
		unroutable, err := outboxnats.New(nc, outboxnats.Config{Subject: "nostream." + prefix + ".{event_type}"})
		if err != nil {
			t.Fatal(err)
		}
		return &publishertest.Broker{
			Publisher:  pub,
			Unroutable: unroutable,
			MaxPayload: int(nc.MaxPayload()) + 1,
			TopicOf:    func(m *outbox.Message) string { return prefix + "." + m.EventType },
			Read:       func(ctx context.Context, n int) ([]publishertest.Received, error) { return readStream(ctx, stream, n) },
		}
	})
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
