package outboxcli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
	"github.com/pgoutbox/outbox/sqs"
)

// TestRelayBrokersByScheme drives `outbox relay --broker URL` against the
// local Redis and RabbitMQ and a webhook endpoint: the scheme picks the
// publisher, --topic becomes its destination, every event arrives.
func TestRelayBrokersByScheme(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		f := setup(t)
		stream := strings.ToUpper(testdb.NewSchemaName("S"))
		rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
		t.Cleanup(func() { rdb.Del(context.Background(), stream); rdb.Close() })
		f.write("order.created", 20)
		r := startRelay(t, &bytes.Buffer{}, dbEnv(), "--schema", f.schema,
			"--broker", "redis://127.0.0.1:6379/0", "--topic", stream, "--poll-interval", "10ms")
		eventually(t, "every event in the Redis stream", func() bool {
			n, _ := rdb.XLen(context.Background(), stream).Result()
			return n == 20
		})
		if code := r.stop(t); code != ExitOK {
			t.Fatalf("exit %d: %s", code, r.stderr)
		}
	})
	t.Run("amqp", func(t *testing.T) {
		f := setup(t)
		conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclare(testdb.NewSchemaName("q"), false, true, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.write("order.created", 20)
		// The default exchange routes by queue name: --topic is the routing key.
		r := startRelay(t, &bytes.Buffer{}, dbEnv(), "--schema", f.schema,
			"--broker", "amqp://guest:guest@127.0.0.1:5672/", "--topic", q.Name, "--poll-interval", "10ms")
		eventually(t, "every event in the RabbitMQ queue", func() bool {
			q, err := ch.QueueDeclarePassive(q.Name, false, true, false, false, nil)
			return err == nil && q.Messages == 20
		})
		if code := r.stop(t); code != ExitOK {
			t.Fatalf("exit %d: %s", code, r.stderr)
		}
	})
	t.Run("webhook", func(t *testing.T) {
		f := setup(t)
		var mu sync.Mutex
		got := map[string]bool{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if r.Header.Get("webhook-signature") == "" || !strings.Contains(string(body), "PAYLOAD-MARKER") {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			mu.Lock()
			got[r.Header.Get("webhook-id")] = true
			mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		f.write("order.created", 10)
		vars := dbEnv()
		vars["OUTBOX_WEBHOOK_SECRET"] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		r := startRelay(t, &bytes.Buffer{}, vars, "--schema", f.schema,
			"--broker", srv.URL+"/hooks/{event_type}?outbox_allow_private_networks=true", "--poll-interval", "10ms")
		eventually(t, "every event delivered to the webhook", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == 10
		})
		if code := r.stop(t); code != ExitOK {
			t.Fatalf("exit %d: %s", code, r.stderr)
		}
	})
}

// With CreateTopology (the relay's topology flag) the NATS publisher
// creates its stream; without it, a subject no stream captures is an outage
// whose error names the subject and the command creating a stream.
func TestBrokerCreateTopology(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	subject := strings.ToLower(testdb.NewSchemaName("topo"))
	stream := strings.ToUpper(subject)
	u, err := url.Parse(testnats.URL())
	if err != nil {
		t.Fatal(err)
	}
	open := func(create bool) outbox.Publisher {
		pub, closer, err := openNATS(ctx, u, BrokerOptions{Topic: subject + ".{event_type}", Logger: slog.New(slog.DiscardHandler),
			CreateTopology: create, StreamName: stream})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closer.Close() })
		return pub
	}
	msg := &outbox.Message{ID: uuid.New(), EventType: "created", Payload: []byte(`{}`)}
	publish := func(pub outbox.Publisher) error {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := pub.Publish(ctx, msg)
			if err == nil || !strings.Contains(err.Error(), "not connected") || time.Now().After(deadline) {
				return err
			}
			time.Sleep(20 * time.Millisecond) // still connecting
		}
	}
	err = publish(open(false))
	if outbox.Classify(err) != outbox.ClassUnavailable || !strings.Contains(err.Error(), subject+".created") ||
		!strings.Contains(err.Error(), "nats stream add") {
		t.Fatalf("without a stream: %v (%s), want unavailable naming the subject and the command", err, outbox.Classify(err))
	}
	nc := testnats.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	if err := publish(open(true)); err != nil {
		t.Fatalf("with CreateTopology: %v", err)
	}
	if _, err := js.Stream(ctx, stream); err != nil {
		t.Fatalf("stream %s not created: %v", stream, err)
	}

	pub, closer, err := openSQS(ctx, &url.URL{Scheme: "sqs", RawQuery: "queue_url=https://sqs.eu-west-1.amazonaws.com/1/q&region=eu-west-1"},
		BrokerOptions{CreateTopology: true})
	if err != nil {
		t.Fatalf("sqs with CreateTopology: %v", err)
	}
	closer.Close()
	if _, ok := pub.(*sqs.Publisher); !ok {
		t.Errorf("sqs publisher is %T", pub)
	}
}
