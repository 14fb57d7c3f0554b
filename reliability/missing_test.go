package reliability

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox"
)

// destination is a broker whose destination (stream, exchange, topic) does
// not exist yet.
type destination struct {
	name    string
	url     string   // --broker
	extra   []string // more relay flags
	keyword string   // expected in last_error
	create  func(t *testing.T)
	ids     func(t *testing.T) map[string]int
	timeout time.Duration // --publish-timeout
}

// TestBadInputMissingDestination: events routed to a stream, exchange or
// topic that does not exist fail with an error naming what is missing, end
// as dead letters (--max-attempts 3) rather than being dropped, and are
// delivered once the operator creates the destination and runs
// `outbox retry --all`.
func TestBadInputMissingDestination(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mk   func(t *testing.T, e *env) destination
	}{
		{"nats", missingNATS}, {"rabbitmq", missingRabbit}, {"redis", missingRedis}, {"kafka", missingKafka},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{noNATS: c.name != "nats"})
			if e.prefix == "" {
				e.prefix = "rel_" + strings.TrimPrefix(e.schema, "t_")
			}
			d := c.mk(t, e)
			e.writeEvents(e.schema, "outbox_events", 20)
			timeout := d.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			r := e.newRelay("r", relayOpts{workers: 1, maxAttempts: 3, broker: d.url, publishTimeout: timeout, extra: d.extra})
			p := r.start()
			// A missing destination is an outage: the relay backs off as a
			// whole, counts no attempt, and its log names what is missing.
			start := time.Now()
			for time.Since(start) < 60*time.Second && !strings.Contains(strings.ToLower(p.stderr.String()), d.keyword) {
				time.Sleep(100 * time.Millisecond)
			}
			named := strings.Contains(strings.ToLower(p.stderr.String()), d.keyword)
			time.Sleep(3 * timeout) // several rounds against the missing destination
			dead := e.dead()
			var attempts int
			_ = e.pool.QueryRow(context.Background(), `SELECT COALESCE(sum(attempts), 0) FROM `+e.table).Scan(&attempts)
			d.create(t)
			took, drained := e.waitDrained(90 * time.Second)
			r.stopGracefully()
			if !drained || !named {
				t.Logf("relay log: %s", tail(p.stderr.String(), 20))
			}
			got := d.ids(t)
			delivered := 0
			for _, id := range e.hist.Committed() {
				if got[id] > 0 {
					delivered++
				}
			}
			ok := named && dead == 0 && attempts == 0 && drained && delivered == 20
			observed := fmt.Sprintf("log names it: %v; %d dead letters, %d attempts burned; after creating it, drained in %s with no retry, %d of 20 delivered",
				named, dead, attempts, took.Round(100*time.Millisecond), delivered)
			if !ok {
				t.Errorf("%s: %s", d.name, observed)
			}
			report.check(Assertion{Area: "bad input", Name: "missing destination: " + d.name,
				Expectation: "an outage: 0 attempts, 0 dead letters, the log names what is missing; delivered once it is created", Observed: observed, Passed: ok})
		})
	}
}

func missingNATS(t *testing.T, e *env) destination {
	stream := "MISSING_" + e.prefix
	return destination{name: "NATS JetStream, no stream captures the subject", url: "", keyword: "stream",
		extra:  []string{"--topic", stream + ".{event_type}"},
		create: func(t *testing.T) { e.createStream(stream, []string{stream + ".>"}, 0) },
		ids: func(t *testing.T) map[string]int {
			out := map[string]int{}
			for _, d := range e.readStream(stream) {
				out[d.ID]++
			}
			return out
		}}
}

func missingRabbit(t *testing.T, e *env) destination {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		missing(t, "RabbitMQ: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex, q := e.prefix+".missing", e.prefix+".q"
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false); _ = ch.ExchangeDelete(ex, false, false) })
	return destination{name: "RabbitMQ, the exchange does not exist", keyword: "exchange",
		url: "amqp://guest:guest@127.0.0.1:5672/?exchange=" + ex,
		create: func(t *testing.T) {
			if err := ch.ExchangeDeclare(ex, "topic", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(q, "#", ex, false, nil); err != nil {
				t.Fatal(err)
			}
		},
		ids: func(t *testing.T) map[string]int {
			out := map[string]int{}
			for {
				d, ok, err := ch.Get(q, true)
				if err != nil || !ok {
					return out
				}
				if id, _ := d.Headers[outbox.HeaderEventID].(string); id != "" {
					out[id]++
				}
			}
		}}
}

func missingRedis(t *testing.T, e *env) destination {
	rc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { rc.Close() })
	if err := rc.Ping(context.Background()).Err(); err != nil {
		missing(t, "Redis: %v", err)
	}
	stream := e.prefix + ".ev"
	t.Cleanup(func() { rc.Del(context.Background(), stream) })
	return destination{name: "Redis Streams, require_stream and no stream", keyword: "stream",
		url: "redis://127.0.0.1:6379/0?require_stream=true",
		create: func(t *testing.T) {
			if err := rc.XGroupCreateMkStream(context.Background(), stream, "g", "$").Err(); err != nil {
				t.Fatal(err)
			}
		},
		ids: func(t *testing.T) map[string]int {
			msgs, err := rc.XRange(context.Background(), stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int{}
			for _, m := range msgs {
				if id, ok := m.Values[outbox.HeaderEventID].(string); ok {
					out[id]++
					continue
				}
				for _, v := range m.Values {
					if s, ok := v.(string); ok && len(s) == 36 {
						out[s]++
					}
				}
			}
			return out
		}}
}

func missingKafka(t *testing.T, e *env) destination {
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	topic := e.prefix + ".ev"
	return destination{name: "Kafka, the topic does not exist (auto-creation off)", keyword: "topic",
		url: "kafka://" + addr, timeout: 15 * time.Second, // above the publisher's 10s delivery timeout, as documented
		create: func(t *testing.T) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			req := kmsg.NewPtrCreateTopicsRequest()
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
			req.Topics = append(req.Topics, rt)
			if _, err := req.RequestWith(context.Background(), cl); err != nil {
				t.Fatal(err)
			}
		},
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
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					for _, h := range r.Headers {
						if h.Key == outbox.HeaderEventID {
							out[string(h.Value)]++
						}
					}
				})
			}
			return out
		}}
}
