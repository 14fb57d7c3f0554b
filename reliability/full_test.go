package reliability

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
)

// fullDest is a broker destination that refuses every message for a reason
// of its own (full), until room is made.
type fullDest struct {
	name    string
	url     string   // --broker ("" : the env's NATS)
	extra   []string // more relay flags
	keyword string   // expected in the relay's log while full
	room    func(t *testing.T)
	ids     func(t *testing.T) map[string]int // what the destination received
}

// TestFaultDestinationFull: a destination that is full (a JetStream stream
// at max_msgs with discard new, a RabbitMQ queue at x-max-length with
// reject-publish, Redis at maxmemory with noeviction) refuses messages for a
// reason that is not the message's: an outage. While it is full no attempt
// is burned and no event becomes a dead letter (--max-attempts 3, several
// publish rounds); once room is made everything is delivered, none lost.
func TestFaultDestinationFull(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mk   func(t *testing.T, e *env) fullDest
	}{
		{"nats", fullNATS}, {"rabbitmq", fullRabbit}, {"redis", fullRedis},
	}
	const n = 30
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{noNATS: c.name != "nats"})
			if e.prefix == "" {
				e.prefix = "rel_" + strings.TrimPrefix(e.schema, "t_")
			}
			d := c.mk(t, e)
			e.writeEvents(e.schema, "outbox_events", n)
			r := e.newRelay("r", relayOpts{workers: 1, batch: 10, maxAttempts: 3, broker: d.url, publishTimeout: 2 * time.Second, extra: d.extra})
			p := r.start()
			start := time.Now()
			for time.Since(start) < 60*time.Second && !strings.Contains(strings.ToLower(p.stderr.String()), d.keyword) {
				time.Sleep(100 * time.Millisecond)
			}
			named := strings.Contains(strings.ToLower(p.stderr.String()), d.keyword)
			time.Sleep(6 * time.Second) // several rounds against the full destination (> 3 attempts' worth)
			pendingFull, deadFull, attemptsFull := e.pending(), e.dead(), e.attemptsBurned()
			d.room(t)
			took, drained := e.waitDrained(90 * time.Second)
			r.stopGracefully()
			if !drained || !named {
				t.Logf("relay log: %s", tail(p.stderr.String(), 20))
			}
			got := d.ids(t)
			lost, dups := 0, 0
			for _, id := range e.hist.Committed() {
				switch c := got[id]; {
				case c == 0:
					lost++
				case c > 1:
					dups += c - 1
				}
			}
			deadAfter, attemptsAfter := e.dead(), e.attemptsBurned()
			ok := named && pendingFull > 0 && deadFull == 0 && attemptsFull == 0 && drained && lost == 0 &&
				deadAfter == 0 && attemptsAfter == 0 && dups <= 10 // at most the batch in flight twice
			observed := fmt.Sprintf("while full: %d of %d pending, %d attempts burned, %d dead letters, the log names it: %v; room made: drained in %s, lost %d, duplicated %d, attempts burned %d, dead letters %d",
				pendingFull, n, attemptsFull, deadFull, named, took.Round(100*time.Millisecond), lost, dups, attemptsAfter, deadAfter)
			if !ok {
				t.Errorf("%s: %s", d.name, observed)
			}
			report.check(Assertion{Area: "faults", Name: "destination full: " + d.name,
				Expectation: "an outage: 0 attempts, 0 dead letters while full; all delivered once room is made (lost 0, duplicates ≤ 10)",
				Observed:    observed, Passed: ok})
		})
	}
}

func fullNATS(t *testing.T, e *env) fullDest {
	stream := "FULL_" + e.prefix
	nc := e.natsConn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.FileStorage,
		MaxMsgs: 5, Discard: jetstream.DiscardNew}
	if _, err := js.CreateStream(ctxT(t, 30*time.Second), cfg); err != nil {
		t.Fatal(err)
	}
	return fullDest{name: "NATS JetStream, stream at max_msgs 5 with discard new", keyword: "max_msgs",
		extra: []string{"--topic", stream + ".{event_type}"},
		room: func(t *testing.T) {
			cfg.MaxMsgs = -1
			if _, err := js.UpdateStream(ctxT(t, 30*time.Second), cfg); err != nil {
				t.Fatal(err)
			}
		},
		ids: func(t *testing.T) map[string]int {
			out := map[string]int{}
			for _, d := range e.readStream(stream) {
				out[d.ID]++
			}
			return out
		}}
}

func fullRabbit(t *testing.T, e *env) fullDest {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		missing(t, "RabbitMQ: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex, q := e.prefix+".full", e.prefix+".fullq"
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false); _ = ch.ExchangeDelete(ex, false, false) })
	if err := ch.ExchangeDeclare(ex, "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, false, false, false, false, amqp.Table{"x-max-length": int32(5), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "#", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	consume := func() {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil || !ok {
				return
			}
			if id, _ := d.Headers[outbox.HeaderEventID].(string); id != "" {
				got[id]++
			}
		}
	}
	var stop chan struct{}
	done := make(chan struct{})
	return fullDest{name: "RabbitMQ, queue at x-max-length 5 with x-overflow reject-publish", keyword: "nack",
		url: "amqp://guest:guest@127.0.0.1:5672/?exchange=" + ex,
		room: func(t *testing.T) { // a consumer catches up: the queue empties as it fills
			stop = make(chan struct{})
			go func() {
				defer close(done)
				for {
					consume()
					select {
					case <-stop:
						consume()
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
		},
		ids: func(t *testing.T) map[string]int {
			close(stop)
			<-done
			return got
		}}
}

func fullRedis(t *testing.T, e *env) fullDest {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		missing(t, "needs the redis-server binary for a server of the test's own (maxmemory is reconfigured): %v", err)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--maxmemory-policy", "noeviction")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	for i := 0; rc.Ping(context.Background()).Err() != nil; i++ {
		if i > 100 {
			t.Fatalf("private redis-server on %s did not answer", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// maxmemory below what the server already uses: every write is
	// refused with OOM.
	if err := rc.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	stream := e.prefix + ".ev"
	return fullDest{name: "Redis Streams, server at maxmemory with noeviction (OOM)", keyword: "oom",
		url: "redis://" + addr + "/0",
		room: func(t *testing.T) {
			if err := rc.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
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
				seen := map[string]bool{} // the id may be in more than one field
				for _, v := range m.Values {
					if s, ok := v.(string); ok && len(s) == 36 && !seen[s] {
						seen[s] = true
						out[s]++
					}
				}
			}
			return out
		}}
}
