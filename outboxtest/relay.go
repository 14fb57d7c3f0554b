package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// Relay is a relay for tests: it publishes into a memory.Publisher, one
// synchronous pass at a time, so a test needs neither a broker nor a sleep.
type Relay struct {
	t     testing.TB
	relay *outbox.Relay
	pub   *memory.Publisher
}

// NewRelay returns a Relay on pool's outbox table; cfg is the relay's
// configuration (its Schema and Table name the table; Ordered, MaxAttempts
// and the others apply as in production). It fails the test on a bad cfg.
func NewRelay(t testing.TB, pool *pgxpool.Pool, cfg outbox.RelayConfig) *Relay {
	t.Helper()
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, cfg)
	if err != nil {
		t.Fatalf("outboxtest: NewRelay: %v", err)
	}
	return &Relay{t: t, relay: r, pub: pub}
}

// Publisher is where the relay publishes: make it fail with FailWith, or
// read everything it got.
func (r *Relay) Publisher() *memory.Publisher { return r.pub }

// maxPasses bounds Drain: a table that never empties (an event failing and
// retried at once, forever) fails the test instead of hanging it.
const maxPasses = 1000

// Drain runs relay passes (claim, publish, mark) until one finds nothing
// to claim, and returns the messages published meanwhile, in publish order.
// Events still waiting afterwards are scheduled for later, waiting for
// their retry, or dead letters. It fails the test on a database error.
func (r *Relay) Drain() []outbox.Message {
	r.t.Helper()
	before := r.pub.Len()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range maxPasses {
		res, err := r.relay.ProcessBatch(ctx)
		if err != nil {
			r.t.Fatalf("outboxtest: relay pass: %v", err)
		}
		if res.Claimed == 0 || res.Unavailable == res.Claimed {
			return r.pub.Messages()[before:]
		}
	}
	r.t.Fatalf("outboxtest: Drain: the table still had events to claim after %d passes", maxPasses)
	return nil
}

// RequirePublished fails the test unless exactly one message published so
// far matches m, and returns it.
func (r *Relay) RequirePublished(m Match) outbox.Message {
	r.t.Helper()
	return requirePublished(r.t, r.pub.Messages(), m)
}

func requirePublished(t testing.TB, msgs []outbox.Message, m Match) outbox.Message {
	t.Helper()
	if err := m.validate(); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	var got []outbox.Message
	for _, msg := range msgs {
		if matchesMessage(m, &msg) {
			got = append(got, msg)
		}
	}
	if len(got) != 1 {
		t.Fatalf("outboxtest: want 1 published message %s, found %d%s", m, len(got), messageListing(msgs))
	}
	return got[0]
}

// WaitPublished waits until a message matching m is published to pub (by a
// relay running in the background, relay.Run) and returns the first one. It
// wakes at each publish, never polls, and fails the test after timeout,
// listing what was published.
func WaitPublished(t testing.TB, pub *memory.Publisher, m Match, timeout time.Duration) outbox.Message {
	t.Helper()
	if err := m.validate(); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var found outbox.Message
	err := pub.WaitFor(ctx, func(msgs []outbox.Message) bool {
		for i := range msgs {
			if matchesMessage(m, &msgs[i]) {
				found = msgs[i]
				found.Payload = append([]byte(nil), msgs[i].Payload...)
				return true
			}
		}
		return false
	})
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("outboxtest: no message %s published within %s%s", m, timeout, messageListing(pub.Messages()))
	}
	if err != nil {
		t.Fatalf("outboxtest: WaitPublished: %v", err)
	}
	return found
}

func matchesMessage(m Match, msg *outbox.Message) bool {
	return m.matches(msg.EventType, msg.AggregateType, msg.AggregateID, msg.Payload)
}

func messageListing(msgs []outbox.Message) string {
	if len(msgs) == 0 {
		return "; nothing was published"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; %d message(s) were published:", len(msgs))
	for i, msg := range msgs {
		if i == 20 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(msgs)-20)
			break
		}
		fmt.Fprintf(&b, "\n  %s", describe(msg.EventType, msg.AggregateType, msg.AggregateID, msg.Payload))
	}
	return b.String()
}
