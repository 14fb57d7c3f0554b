package outboxcli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox/internal/testdb"
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
