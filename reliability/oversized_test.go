package reliability

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox"
)

// brokerUnderTest is one broker the relay command publishes to, with a way
// to read back the event ids it holds.
type brokerUnderTest struct {
	name  string
	limit int // bytes
	url   string
	ids   func(t *testing.T) map[string]int
	fixed string // a bug this suite found here, fixed in this commit
}

// noise returns a JSON-safe string of about n bytes that does not compress.
func noise(n int) string {
	b := make([]byte, n*3/4)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestBadInputOversizedPerBroker: for each broker the relay command speaks,
// an event above the broker's size limit among ordinary events: the big one
// must become a dead letter at once, the others must all be delivered.
func TestBadInputOversizedPerBroker(t *testing.T) {
	t.Parallel()
	const limit = 16 << 10
	brokers := []struct {
		name string
		mk   func(t *testing.T, prefix string) brokerUnderTest
	}{
		{"rabbitmq", rabbitBroker},
		{"redis", redisBroker},
		{"kafka-cap-set", func(t *testing.T, prefix string) brokerUnderTest { return kafkaBroker(t, prefix, true) }},
		{"kafka-default-cap", func(t *testing.T, prefix string) brokerUnderTest { return kafkaBroker(t, prefix, false) }},
	}
	for _, bt := range brokers {
		mk := bt.mk
		t.Run(bt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{noNATS: true})
			e.prefix = "rel_" + strings.TrimPrefix(e.schema, "t_")
			b := mk(t, e.prefix)
			w, err := outbox.NewWriter(outbox.WriterConfig{Schema: e.schema})
			if err != nil {
				t.Fatal(err)
			}
			// 40 events of about 1 kB over 4 aggregates, the big one in the middle.
			var evs []outbox.Event
			var bigID string
			for i := 0; i < 40; i++ {
				agg := fmt.Sprintf("a%d", i%4)
				ev := outbox.Event{ID: uuid.Must(uuid.NewV7()), AggregateType: "acct", AggregateID: agg, EventType: "ev",
					Payload: fmt.Appendf(nil, `{"n":%d,"agg":%q,"pad":%q}`, i/4, agg, noise(1000))}
				if i == 20 {
					ev.AggregateID = "big"
					ev.Payload = fmt.Appendf(nil, `{"n":0,"agg":"big","pad":%q}`, noise(limit+1024))
					bigID = ev.ID.String()
				} else {
					e.hist.Record(Committed, Written{ID: ev.ID.String(), Aggregate: agg, N: i / 4})
				}
				evs = append(evs, ev)
			}
			if err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error { _, err := w.Write(context.Background(), tx, evs...); return err }); err != nil {
				t.Fatal(err)
			}
			r := e.newRelay("r", relayOpts{workers: 1, batch: 100, maxAttempts: 3, broker: b.url})
			p := r.start()
			start := time.Now()
			_, drained := e.waitDrained(90 * time.Second)
			took := time.Since(start)
			r.stopGracefully()
			if !drained {
				t.Fatalf("%s: not drained: %s", b.name, tail(p.stderr.String(), 20))
			}
			var bigAttempts int
			var bigDead bool
			var bigErr string
			if err := e.pool.QueryRow(context.Background(), `SELECT attempts, dead_at IS NOT NULL, COALESCE(last_error, '') FROM `+e.table+` WHERE id = $1`, bigID).Scan(&bigAttempts, &bigDead, &bigErr); err != nil {
				t.Fatal(err)
			}
			deadGood := e.count("dead_at IS NOT NULL AND id <> '" + bigID + "'")
			got := b.ids(t)
			delivered := 0
			for _, id := range e.hist.Committed() {
				if got[id] > 0 {
					delivered++
				}
			}
			ok := bigDead && bigAttempts == 1 && deadGood == 0 && delivered == 39 && got[bigID] == 0
			observed := fmt.Sprintf("big event: dead letter %v after %d attempt(s) (%s); ordinary events: %d of 39 delivered, %d dead-lettered; %s",
				bigDead, bigAttempts, firstLine(bigErr), delivered, deadGood, took.Round(100*time.Millisecond))
			name := fmt.Sprintf("%s: event above the %d-byte limit among 39 ordinary ones", b.name, b.limit)
			if b.fixed != "" {
				regression(t, "Kafka: a record batch over the topic's limit dead-lettered the healthy events batched with the oversized one", b.fixed,
					"only the oversized event is dead-lettered, whatever the publisher's cap", ok, name+": "+observed)
				return
			}
			if !ok {
				t.Errorf("%s", observed)
			}
			report.check(Assertion{Area: "bad input", Name: "oversized, " + name,
				Expectation: "the big event is dead-lettered at the first attempt; every other event is delivered", Observed: observed, Passed: ok})
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// rabbitBroker: the local RabbitMQ, an exchange and a queue of the test's
// own; max_message_size in the URL stands for the broker's limit (lowering
// the shared broker's own limit would disturb other tests).
func rabbitBroker(t *testing.T, prefix string) brokerUnderTest {
	const limit = 16 << 10
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		missing(t, "RabbitMQ at 127.0.0.1:5672: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex, q := prefix+".ex", prefix+".q"
	if err := ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "#", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false); _ = ch.ExchangeDelete(ex, false, false) })
	return brokerUnderTest{name: "RabbitMQ", limit: limit,
		url: fmt.Sprintf("amqp://guest:guest@127.0.0.1:5672/?exchange=%s&max_message_size=%d", ex, limit),
		ids: func(t *testing.T) map[string]int {
			out := map[string]int{}
			for {
				d, ok, err := ch.Get(q, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return out
				}
				if id, _ := d.Headers[outbox.HeaderEventID].(string); id != "" {
					out[id]++
				} else {
					out[d.MessageId]++
				}
			}
		}}
}

// redisBroker: the local Redis, a stream of the test's own; max_value_size
// in the URL is the limit.
func redisBroker(t *testing.T, prefix string) brokerUnderTest {
	const limit = 16 << 10
	rc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { rc.Close() })
	if err := rc.Ping(context.Background()).Err(); err != nil {
		missing(t, "Redis at 127.0.0.1:6379: %v", err)
	}
	stream := prefix + ".ev"
	t.Cleanup(func() { rc.Del(context.Background(), stream) })
	return brokerUnderTest{name: "Redis Streams", limit: limit,
		url: fmt.Sprintf("redis://127.0.0.1:6379/0?max_value_size=%d", limit),
		ids: func(t *testing.T) map[string]int {
			msgs, err := rc.XRange(context.Background(), stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int{}
			for _, m := range msgs {
				for _, v := range m.Values {
					if s, ok := v.(string); ok && len(s) == 36 {
						if _, err := uuid.Parse(s); err == nil {
							out[s]++
						}
					}
				}
			}
			return out
		}}
}

// kafkaBroker: kfake, an in-process Kafka speaking the real protocol, with
// message.max.bytes lowered to 16 kB. capSet says whether the relay's URL
// tells the publisher that limit (max_message_bytes) or leaves Kafka's
// default.
func kafkaBroker(t *testing.T, prefix string, capSet bool) brokerUnderTest {
	const limit = 16 << 10
	topic := prefix + ".ev"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(limit)}),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	b := brokerUnderTest{limit: limit, url: "kafka://" + addr,
		ids: func(t *testing.T) map[string]int {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			out := map[string]int{}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					for _, h := range r.Headers {
						if h.Key == outbox.HeaderEventID {
							out[string(h.Value)]++
						}
					}
				})
			}
			return out
		}}
	if capSet {
		b.name = "Kafka (publisher cap = topic limit)"
		b.url += fmt.Sprintf("?max_message_bytes=%d", limit)
	} else {
		b.name = "Kafka (publisher cap left at Kafka's default)"
		b.fixed = "3f5fd8e"
	}
	return b
}
