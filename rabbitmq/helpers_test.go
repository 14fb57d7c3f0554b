package rabbitmq_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/rabbitmq"
)

// brokerURL is the test broker, RABBITMQ_URL or the local default.
func brokerURL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

// viaProxy returns brokerURL pointed at a fresh proxy to the broker.
func viaProxy(t *testing.T) (string, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	p := tcpproxy.Start(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// admin is a direct connection (no proxy) for declaring and reading.
type admin struct {
	t    *testing.T
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newAdmin(t *testing.T) *admin {
	t.Helper()
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", brokerURL(), err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &admin{t: t, conn: conn, ch: ch}
}

func uniqueName(kind string) string { return testdb.NewSchemaName("pgoutbox.test." + kind) }

// exchange declares a fresh topic exchange, deleted when the test ends.
func (a *admin) exchange() string {
	a.t.Helper()
	name := uniqueName("x")
	if err := a.ch.ExchangeDeclare(name, "topic", false, false, false, false, nil); err != nil {
		a.t.Fatalf("declare exchange: %v", err)
	}
	a.t.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })
	return name
}

// queue declares a fresh queue bound to exchange with each binding key,
// deleted when the test ends.
func (a *admin) queue(exchange string, args amqp.Table, bindings ...string) string {
	a.t.Helper()
	q, err := a.ch.QueueDeclare(uniqueName("q"), false, false, false, false, args)
	if err != nil {
		a.t.Fatalf("declare queue: %v", err)
	}
	a.t.Cleanup(func() { _, _ = a.ch.QueueDelete(q.Name, false, false, false) })
	for _, key := range bindings {
		if err := a.ch.QueueBind(q.Name, key, exchange, false, nil); err != nil {
			a.t.Fatalf("bind queue: %v", err)
		}
	}
	return q.Name
}

// exchangeExists checks with a passive declare on a throwaway channel (a
// missing exchange closes the channel).
func (a *admin) exchangeExists(name string) bool {
	a.t.Helper()
	ch, err := a.conn.Channel()
	if err != nil {
		a.t.Fatal(err)
	}
	defer ch.Close()
	return ch.ExchangeDeclarePassive(name, "topic", false, false, false, false, nil) == nil
}

// reader consumes a queue with basic.get and keeps everything it got, so
// every Read returns all messages received so far.
type reader struct {
	ch    *amqp.Channel
	queue string
	mu    sync.Mutex
	got   []amqp.Delivery
}

func (a *admin) reader(queue string) *reader { return &reader{ch: a.ch, queue: queue} }

// deliveries waits until the queue has yielded at least n messages in all.
func (r *reader) deliveries(ctx context.Context, n int) ([]amqp.Delivery, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.got) < n {
		d, ok, err := r.ch.Get(r.queue, true)
		if err != nil {
			return r.got, fmt.Errorf("basic.get %s: %w", r.queue, err)
		}
		if ok {
			r.got = append(r.got, d)
			continue
		}
		select {
		case <-ctx.Done():
			return r.got, ctx.Err()
		case <-time.After(10 * time.Millisecond): // poll interval
		}
	}
	return r.got, nil
}

func (r *reader) Read(ctx context.Context, n int) ([]publishertest.Received, error) {
	ds, err := r.deliveries(ctx, n)
	out := make([]publishertest.Received, len(ds))
	for i, d := range ds {
		h := map[string]string{}
		for k, v := range d.Headers {
			h[k] = fmt.Sprint(v)
		}
		if d.ContentType != "" {
			h["content-type"] = d.ContentType // a property, where CloudEvents looks for datacontenttype
		}
		out[i] = publishertest.Received{Topic: d.RoutingKey, DedupID: d.MessageId, Headers: h, Payload: d.Body}
	}
	return out, err
}

// drained reports whether the queue holds nothing more now.
func (r *reader) drained(t *testing.T) bool {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok, err := r.ch.Get(r.queue, true)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		r.got = append(r.got, d)
	}
	return !ok
}

func newPublisher(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Publisher {
	t.Helper()
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	p, err := rabbitmq.New(cfg)
	if err != nil {
		t.Fatalf("rabbitmq.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func msgs(n int, eventType string) []*outbox.Message {
	out := make([]*outbox.Message, n)
	for i := range out {
		out[i] = publishertest.NewMessage(fmt.Sprint(i), fmt.Sprintf(`{"n":%d}`, i))
		out[i].EventType = eventType
	}
	return out
}

func byID(ds []amqp.Delivery) map[string]int {
	m := map[string]int{}
	for _, d := range ds {
		m[d.MessageId]++
	}
	return m
}
