package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	outboxredis "github.com/pgoutbox/outbox/redis"
)

// otherBroker is a broker other than NATS that a scenario runs against:
// relays reach addr through their broker proxy (so the test can cut,
// partition or slow the path without touching the shared server) and read
// returns everything the destination received, in order.
type otherBroker struct {
	name string
	addr string
	url  func(proxyAddr string) string
	read func(t *testing.T) []Delivery
}

// deliveryFrom builds a Delivery from an event id, an aggregate and a
// payload written by the workload.
func deliveryFrom(seq uint64, id, agg string, body []byte) Delivery {
	d := Delivery{Seq: seq, ID: id, Aggregate: agg, N: -1}
	var p payload
	if json.Unmarshal(body, &p) == nil && p.N != nil {
		d.N = *p.N
	}
	return d
}

// rabbitUnderTest declares a topic exchange and a queue bound to it, both
// deleted when the test ends; the relay publishes to the exchange.
func rabbitUnderTest(t *testing.T, e *env) *otherBroker {
	const addr = "127.0.0.1:5672"
	conn, err := amqp.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		missing(t, "RabbitMQ at %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex, q := e.prefix+".x", e.prefix+".q"
	if err := ch.ExchangeDeclare(ex, "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "#", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false); _ = ch.ExchangeDelete(ex, false, false) })
	return &otherBroker{name: "RabbitMQ", addr: addr,
		url: func(p string) string { return "amqp://guest:guest@" + p + "/?exchange=" + ex },
		read: func(t *testing.T) []Delivery {
			var out []Delivery
			for {
				d, ok, err := ch.Get(q, true)
				if err != nil {
					t.Fatalf("read queue %s: %v", q, err)
				}
				if !ok {
					return out
				}
				id, _ := d.Headers[outbox.HeaderEventID].(string)
				agg, _ := d.Headers[outbox.HeaderAggregateID].(string)
				out = append(out, deliveryFrom(uint64(len(out)+1), id, agg, d.Body))
			}
		}}
}

// redisUnderTest is the shared Redis; the relay adds to the stream named
// after the topic, deleted when the test ends.
func redisUnderTest(t *testing.T, e *env) *otherBroker {
	const addr = "127.0.0.1:6379"
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	if err := rc.Ping(context.Background()).Err(); err != nil {
		missing(t, "Redis at %s: %v", addr, err)
	}
	stream := e.prefix + ".ev"
	t.Cleanup(func() { rc.Del(context.Background(), stream) })
	return &otherBroker{name: "Redis Streams", addr: addr,
		url: func(p string) string { return "redis://" + p + "/0" },
		read: func(t *testing.T) []Delivery {
			msgs, err := rc.XRange(context.Background(), stream, "-", "+").Result()
			if err != nil {
				t.Fatalf("read stream %s: %v", stream, err)
			}
			out := make([]Delivery, 0, len(msgs))
			for i, m := range msgs {
				id, _ := m.Values[outboxredis.FieldID].(string)
				agg, _ := m.Values[outboxredis.FieldAggregateID].(string)
				body, _ := m.Values[outboxredis.FieldPayload].(string)
				out = append(out, deliveryFrom(uint64(i+1), id, agg, []byte(body)))
			}
			return out
		}}
}

// TestScenario14OtherBrokers runs the crash, outage and network scenarios
// against RabbitMQ and Redis (scenarios 1, 3 and 4 run against NATS), at a
// smaller size. The shared servers are never stopped: the outage and the
// network faults are played on each relay's proxy to the broker (connections
// reset and refused; latency above the publish timeout, resets, a
// partition). Counts asserted: lost 0, dead letters 0, attempts burned 0
// for outages and network faults (at most the batches in flight per kill
// for crashes), duplicates at most the batches in flight per fault.
func TestScenario14OtherBrokers(t *testing.T) {
	t.Parallel()
	brokers := []struct {
		key string
		mk  func(*testing.T, *env) *otherBroker
	}{{"r", rabbitUnderTest}, {"d", redisUnderTest}}
	faults := []struct {
		key string
		run func(t *testing.T, e *env, key string)
	}{{"crash", otherBrokerCrash}, {"outage", otherBrokerOutage}, {"network", otherBrokerNetwork}}
	for _, b := range brokers {
		for i, f := range faults {
			t.Run(fmt.Sprintf("%s/%s", map[string]string{"r": "rabbitmq", "d": "redis"}[b.key], f.key), func(t *testing.T) {
				t.Parallel()
				slot(t)
				e := newEnv(t, envOpts{noNATS: true})
				e.prefix = "rel_" + strings.TrimPrefix(e.schema, "t_")
				e.broker = b.mk(t, e)
				f.run(t, e, fmt.Sprintf("14%c%s", 'a'+i, b.key))
			})
		}
	}
}

func otherBrokerCrash(t *testing.T, e *env, key string) {
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	a := e.newRelay("a", relayOpts{workers: 2, batch: 20})
	b := e.newRelay("b", relayOpts{workers: 2, batch: 50})
	pa := a.start()
	a.waitPublishing(pa, 30*time.Second)
	b.start()
	kills := long(10, 50)
	for range kills {
		time.Sleep(time.Duration(300+rand.IntN(600)) * time.Millisecond)
		a.restart()
	}
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(time.Minute, 5*time.Minute)); !ok {
		t.Errorf("not drained after the last kill: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	a.stopGracefully()
	b.stopGracefully()
	inFlight := kills * 2 * 20
	e.finish(Row{Key: key, Scenario: "Relay SIGKILLed, " + e.broker.name,
		Fault: fmt.Sprintf("SIGKILL of relay A (2 workers, batch 20) at random times, relay B running, writers running; %s", e.broker.name),
		Runs:  kills, Resent: -1, Drain: drain,
		Details: []string{fmt.Sprintf("relay A killed %d times, 300-900ms apart; writers: %d transactions", kills, w.txs.Load())},
		Bound:   &Bounds{Attempts: inFlight, Duplicated: inFlight, DeadLetters: 0}})
}

func otherBrokerOutage(t *testing.T, e *env, key string) {
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 100, publishTimeout: 2 * time.Second})
	p := r.start()
	r.waitPublishing(p, 30*time.Second)
	outage := long(6*time.Second, time.Minute)
	var details []string
	attemptsDuring, deadDuring := 0, 0
	for i := range 2 {
		time.Sleep(time.Second)
		before := e.pending()
		r.nats.Cut() // the broker "goes away": connections reset, new ones refused
		time.Sleep(outage)
		peak := e.pending()
		attemptsDuring = max(attemptsDuring, e.attemptsBurned())
		deadDuring = max(deadDuring, e.dead())
		r.nats.Restore()
		details = append(details, fmt.Sprintf("outage %d: %s unreachable for %s (connections reset, new ones refused), pending %d -> %d", i+1, e.broker.name, outage, before, peak))
	}
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(time.Minute, 5*time.Minute)); !ok {
		t.Errorf("not drained after the outage: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if p.exited() {
		t.Errorf("relay exited during the outage: %s", tail(p.stderr.String(), 20))
	}
	r.stopGracefully()
	if attemptsDuring > 0 || deadDuring > 0 {
		t.Errorf("during the outage: %d attempts burned, %d dead letters; want 0 and 0", attemptsDuring, deadDuring)
	}
	details = append(details, fmt.Sprintf("during the outages: at most %d attempts burned, %d dead letters", attemptsDuring, deadDuring))
	e.finish(Row{Key: key, Scenario: "Broker down, " + e.broker.name,
		Fault: fmt.Sprintf("%s unreachable twice for %s while writers run (proxy: connections reset, new ones refused)", e.broker.name, outage),
		Runs:  2, Resent: -1, Drain: drain, Details: details,
		Bound: &Bounds{Attempts: 0, Duplicated: 2 * 2 * 100, DeadLetters: 0}})
}

func otherBrokerNetwork(t *testing.T, e *env, key string) {
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 100, publishTimeout: 2 * time.Second})
	p := r.start()
	r.waitPublishing(p, 30*time.Second)
	px := r.nats
	phase := long(5*time.Second, 30*time.Second)
	runs := 0
	var details []string
	time.Sleep(time.Second)
	px.SetLatency(3 * time.Second) // above the 2s publish timeout
	runs++
	time.Sleep(phase)
	px.SetLatency(0)
	details = append(details, fmt.Sprintf("latency 3s per chunk (above the 2s publish timeout) for %s", phase))
	time.Sleep(time.Second)
	resets := 0
	for start := time.Now(); time.Since(start) < phase; time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond) {
		before := px.Stats().Resets
		px.ResetAll()
		if px.Stats().Resets > before {
			resets++
			runs++
		}
	}
	details = append(details, fmt.Sprintf("%d connection resets over %s", resets, phase))
	time.Sleep(time.Second)
	px.Partition()
	runs++
	time.Sleep(phase + 2*time.Second) // longer than the publish timeout
	px.Restore()
	details = append(details, fmt.Sprintf("partition (bytes held, delivered on heal) for %s", phase+2*time.Second))
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(time.Minute, 5*time.Minute)); !ok {
		t.Errorf("not drained after the network faults: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if p.exited() {
		t.Errorf("relay exited during network faults: %s", tail(p.stderr.String(), 20))
	}
	r.stopGracefully()
	inFlight := runs * 2 * 100
	e.finish(Row{Key: key, Scenario: "Network faults between relay and broker, " + e.broker.name,
		Fault: "latency 3s (above the publish timeout), connection resets, partition longer than the publish timeout",
		Runs:  runs, Resent: -1, Drain: drain, Details: details,
		Bound: &Bounds{Attempts: 0, Duplicated: inFlight, DeadLetters: 0}})
}
