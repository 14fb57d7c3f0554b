// Package testbroker gives end-to-end tests a real broker to relay to and
// read back: a NATS JetStream stream or a Redis stream of the test's own,
// with a reader that returns what was published as consumers receive it
// (inbox.Message), in broker order. The root package's tests and package
// admin's share it.
package testbroker

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/natsinbox"
	"github.com/pgoutbox/outbox/inbox/redisinbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
	outboxredis "github.com/pgoutbox/outbox/redis"
)

// Broker is a broker under an end-to-end test: a publisher and a way to
// read back, in broker order, everything published.
type Broker struct {
	Pub outbox.Publisher
	// Read returns the n messages published, failing the test if the
	// broker holds fewer (or, for Redis, another number).
	Read func(t *testing.T, n int) []inbox.Message
}

// NATS is a JetStream stream of the test's own (testnats.Stream).
func NATS(t *testing.T) Broker {
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".events"})
	if err != nil {
		t.Fatal(err)
	}
	return Broker{Pub: pub, Read: func(t *testing.T, n int) []inbox.Message {
		cons, err := stream.OrderedConsumer(testenv.Ctx(t), jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var out []inbox.Message
		for len(out) < n {
			batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for msg := range batch.Messages() {
				m, err := natsinbox.ToMessage(msg)
				if err != nil {
					t.Fatal(err)
				}
				out, got = append(out, m), got+1
			}
			if got == 0 {
				t.Fatalf("NATS stream holds %d messages, want %d", len(out), n)
			}
		}
		return out
	}}
}

// Redis is a Redis stream of the test's own on RedisURL, deleted when the
// test ends.
func Redis(t *testing.T) Broker {
	opts, err := goredis.ParseURL(RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	key := testdb.NewSchemaName("pgoutbox:test:replay")
	t.Cleanup(func() { c.Del(context.Background(), key) })
	pub, err := outboxredis.New(c, outboxredis.Config{Stream: key})
	if err != nil {
		t.Fatal(err)
	}
	return Broker{Pub: pub, Read: func(t *testing.T, n int) []inbox.Message {
		xs, err := c.XRange(testenv.Ctx(t), key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(xs) != n {
			t.Fatalf("Redis stream holds %d entries, want %d", len(xs), n)
		}
		out := make([]inbox.Message, len(xs))
		for i, x := range xs {
			if out[i], err = redisinbox.ToMessage(x); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}}
}

// RedisURL is REDIS_URL, by default redis://127.0.0.1:6379/0.
func RedisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}
