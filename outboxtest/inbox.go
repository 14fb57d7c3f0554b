package outboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
)

// Delivered is the inbox.Message a consumer receives for a published
// message, as every broker adapter builds it from the headers every
// publisher sets: hand it to the consumer's inbox.Processor.
func Delivered(t testing.TB, m outbox.Message) inbox.Message {
	t.Helper()
	msg, err := inbox.MessageFromHeaders(m.StandardHeaders(), m.Payload)
	if err != nil {
		t.Fatalf("outboxtest: Delivered: %v", err)
	}
	return msg
}

// RequireIdempotent delivers msg to proc twice, as an at-least-once broker
// may, and fails the test unless the first delivery was processed, the
// second was recognised as a duplicate, and the effects happened once:
// effects counts them (say, the rows the handler writes), and must change
// with the first delivery and not with the second. proc is the consumer's
// processing, inbox.Inbox.Processor(handler).
func RequireIdempotent(t testing.TB, proc inbox.Processor, msg inbox.Message, effects func() int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := effects()
	res, err := proc(ctx, msg)
	if err != nil {
		t.Fatalf("outboxtest: first delivery of event %s: %v", msg.ID, err)
	}
	if res.Duplicate {
		t.Fatalf("outboxtest: first delivery of event %s was taken for a duplicate: the inbox already recorded it (a fresh event id per test, or a consumer name of its own)", msg.ID)
	}
	first := effects()
	if first == before {
		t.Fatalf("outboxtest: the first delivery of event %s left the effects at %d: the handler did nothing that effects counts", msg.ID, before)
	}
	res, err = proc(ctx, msg)
	if err != nil {
		t.Fatalf("outboxtest: second delivery of event %s: %v", msg.ID, err)
	}
	if !res.Duplicate {
		t.Errorf("outboxtest: the second delivery of event %s was not recognised as a duplicate: does proc go through the inbox (inbox.Inbox.Processor)?", msg.ID)
	}
	if second := effects(); second != first {
		t.Errorf("outboxtest: the second delivery of event %s changed the effects from %d to %d: an effect happened twice (does the handler write outside the transaction it is given?)", msg.ID, first, second)
	}
}
