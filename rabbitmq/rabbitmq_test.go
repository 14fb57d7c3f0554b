package rabbitmq_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/rabbitmq"
)

const testMaxMessageSize = 256 << 10

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		a := newAdmin(t)
		ex := a.exchange()
		q := a.queue(ex, nil, "#")
		nowhere := a.exchange() // no queue bound
		u, proxy := viaProxy(t)
		pub := newPublisher(t, rabbitmq.Config{URL: u, Exchange: ex, MaxMessageSize: testMaxMessageSize})
		unroutable := newPublisher(t, rabbitmq.Config{URL: u, Exchange: nowhere})
		return &publishertest.Broker{
			Publisher:      pub,
			Read:           a.reader(q).Read,
			MaxPayload:     testMaxMessageSize + 1,
			Unroutable:     unroutable,
			UnroutableName: nowhere,
			RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
				return fullQueue(t, a, u)
			},
			Disconnect: func(*testing.T) func() {
				proxy.Cut()
				return proxy.Restore
			},
			CloudEvents: &publishertest.CloudEvents{Prefix: rabbitmq.HeaderCloudEventsPrefix, ContentType: "content-type"},
		}
	})
}

func TestMessageProperties(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange()
	r := a.reader(a.queue(ex, nil, "orders.#"))
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: ex, RoutingKey: "orders.{aggregate_id}.{event_type}"})
	m := publishertest.NewMessage("42", `{"id":42}`)
	if err := pub.Publish(ctxFor(t, 10*time.Second), m); err != nil {
		t.Fatal(err)
	}
	ds, err := r.deliveries(ctxFor(t, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"delivery_mode", d.DeliveryMode, amqp.Persistent},
		{"message_id", d.MessageId, m.ID.String()},
		{"content_type", d.ContentType, "application/json"},
		{"type", d.Type, m.EventType},
		{"timestamp", d.Timestamp.Unix(), m.CreatedAt.Unix()},
		{"exchange", d.Exchange, ex},
		{"routing key", d.RoutingKey, "orders.42.order.created"},
		{"body", string(d.Body), string(m.Payload)},
		{"routing key method", pub.RoutingKey(m), "orders.42.order.created"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	for k, v := range m.StandardHeaders() {
		if got, ok := d.Headers[k].(string); !ok || got != v {
			t.Errorf("header %s = %#v, want the string %q", k, d.Headers[k], v)
		}
	}
}

// Returns are matched to their messages: in a batch mixing routable and
// unroutable messages, exactly the unroutable ones fail.
func TestMandatoryReturnsFailExactlyTheUnroutable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange()
	r := a.reader(a.queue(ex, nil, "order.created"))
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: ex})

	batch := msgs(40, "order.created")
	routed := map[string]bool{}
	for _, m := range batch {
		if rand.N(2) == 0 {
			m.EventType = "order.nobody-listens"
		} else {
			routed[m.ID.String()] = true
		}
	}
	errs := pub.PublishBatch(ctxFor(t, 30*time.Second), batch)
	for i, m := range batch {
		switch {
		case routed[m.ID.String()] && errs[i] != nil:
			t.Errorf("message %d (routable): %v", i, errs[i])
		case !routed[m.ID.String()] && !errors.Is(errs[i], rabbitmq.ErrUnroutable):
			t.Errorf("message %d (unroutable): %v, want ErrUnroutable", i, errs[i])
		case !routed[m.ID.String()] && outbox.Classify(errs[i]) != outbox.ClassUnavailable:
			t.Errorf("message %d (unroutable): class %s, want unavailable (a missing queue refuses every message alike)", i, outbox.Classify(errs[i]))
		case !routed[m.ID.String()] && !strings.Contains(errs[i].Error(), "order.nobody-listens"):
			t.Errorf("message %d (unroutable): %v, want the routing key named", i, errs[i])
		}
	}
	ds, err := r.deliveries(ctxFor(t, 10*time.Second), len(routed))
	if err != nil {
		t.Fatal(err)
	}
	for id := range byID(ds) {
		if !routed[id] {
			t.Errorf("queue holds %s, which was not routable", id)
		}
	}
	if !r.drained(t) {
		t.Error("queue holds more messages than were routable")
	}
}

func TestDefaultExchangeRoutesByQueueName(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue("", nil) // every queue is bound to the default exchange by name
	r := a.reader(q)
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), RoutingKey: q})
	if err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.deliveries(ctxFor(t, 10*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	nowhere := newPublisher(t, rabbitmq.Config{URL: brokerURL(), RoutingKey: "no-such-queue-{aggregate_id}"})
	if err := nowhere.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`)); !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Fatalf("publish to a queue that does not exist: %v, want ErrUnroutable", err)
	}
}

// A queue at its x-max-length with reject-publish refuses every message: an
// outage, not a property of the messages.
func TestNackIsUnavailable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange()
	a.queue(ex, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}, "#")
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: ex})
	errs := pub.PublishBatch(ctxFor(t, 10*time.Second), msgs(3, "order.created"))
	if errs[0] != nil {
		t.Fatalf("first message, which fits in the queue: %v", errs[0])
	}
	for i := 1; i < 3; i++ {
		if !errors.Is(errs[i], rabbitmq.ErrNacked) || outbox.Classify(errs[i]) != outbox.ClassUnavailable {
			t.Errorf("message %d beyond x-max-length: %v (%s), want an unavailable ErrNacked", i, errs[i], outbox.Classify(errs[i]))
		}
	}
}

// A connection lost with a batch in flight fails every unconfirmed message as
// unavailable; nothing is reported published that the broker did not
// confirm, and the next batch reconnects.
func TestConnectionLostMidBatch(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange()
	r := a.reader(a.queue(ex, nil, "#"))
	u, proxy := viaProxy(t)
	pub := newPublisher(t, rabbitmq.Config{URL: u, Exchange: ex})
	if err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("warm-up", `{}`)); err != nil {
		t.Fatal(err)
	}

	// With 300ms each way, no confirm can come back within 600ms of the
	// batch reaching the proxy; the cut lands well inside that window.
	proxy.SetLatency(300 * time.Millisecond)
	batch := msgs(50, "order.created")
	size := 0
	for _, m := range batch {
		size += len(m.Payload)
	}
	before := proxy.BytesFromClients()
	done := make(chan []error, 1)
	go func() { done <- pub.PublishBatch(ctxFor(t, 30*time.Second), batch) }()
	testkit.Eventually(t, 10*time.Second, "the batch reaching the proxy", func() bool { return proxy.BytesFromClients()-before >= int64(size) })
	proxy.Cut()
	errs := <-done

	failed := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed++
		if outbox.Classify(err) != outbox.ClassUnavailable {
			t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
		}
	}
	if failed == 0 {
		t.Fatal("every message of a batch cut off before its confirms came back was reported published")
	}
	t.Logf("%d of %d messages failed with the connection", failed, len(batch))

	proxy.SetLatency(0)
	proxy.Restore()
	var retry []*outbox.Message
	for i, err := range errs {
		if err != nil {
			retry = append(retry, batch[i])
		}
	}
	for i, err := range pub.PublishBatch(ctxFor(t, 30*time.Second), retry) {
		if err != nil {
			t.Fatalf("re-publish %d after restore: %v", i, err)
		}
	}
	// Every message reported published, first time or second, is there.
	ds, err := r.deliveries(ctxFor(t, 20*time.Second), 1+len(batch))
	seen := byID(ds)
	for i, m := range batch {
		if seen[m.ID.String()] == 0 {
			t.Errorf("message %d (error %v the first time) is not in the queue: %v", i, errs[i], err)
		}
	}
}

// The broker closes the channel when a message goes to a missing exchange:
// that message fails with the broker's 404, the rest of the batch as
// unavailable, and the publisher opens a new channel for the next batch.
func TestChannelClosedByBrokerMidBatch(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange()
	q := a.queue(ex, nil, "#")
	r := a.reader(q)
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: ex})
	if err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("before", `{}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.ch.ExchangeDelete(ex, false, false); err != nil {
		t.Fatal(err)
	}
	batch := msgs(3, "order.created")
	errs := pub.PublishBatch(ctxFor(t, 10*time.Second), batch)
	var amqpErr *amqp.Error
	if !errors.As(errs[0], &amqpErr) || amqpErr.Code != amqp.NotFound || outbox.Classify(errs[0]) != outbox.ClassUnavailable ||
		!strings.Contains(errs[0].Error(), "rabbitmqadmin declare exchange name="+ex) {
		t.Errorf("first message to the deleted exchange: %v (%s), want the broker's 404, unavailable, naming the command", errs[0], outbox.Classify(errs[0]))
	}
	for i := 1; i < len(batch); i++ {
		if outbox.Classify(errs[i]) != outbox.ClassUnavailable {
			t.Errorf("message %d, discarded with the channel: %v (%s), want unavailable", i, errs[i], outbox.Classify(errs[i]))
		}
	}

	if err := a.ch.ExchangeDeclare(ex, "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.ch.QueueBind(q, "#", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	for i, err := range pub.PublishBatch(ctxFor(t, 10*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %d once the exchange is back: %v", i, err)
		}
	}
	if _, err := r.deliveries(ctxFor(t, 10*time.Second), 1+len(batch)); err != nil {
		t.Fatal(err)
	}
}

// A message over the broker's own max_message_size (lower than the
// publisher's MaxMessageSize) closes the channel with 406: that message fails
// permanently and its neighbours do not.
func TestOversizedRefusedByBroker(t *testing.T) {
	t.Parallel()
	// The test lowers the broker's max_message_size for a moment: only on a
	// broker of its own (CI's), or when asked to.
	if os.Getenv("CI") != "true" && os.Getenv("OUTBOX_TEST_CHANGE_BROKER_SETTINGS") != "1" {
		t.Skip("changes the broker's max_message_size: runs with CI=true or OUTBOX_TEST_CHANGE_BROKER_SETTINGS=1")
	}
	rabbitmqctl, err := exec.LookPath("rabbitmqctl")
	if err != nil || !strings.Contains(brokerURL(), "127.0.0.1") {
		t.Fatal("needs rabbitmqctl for the local broker, to lower max_message_size")
	}
	eval := func(expr string) string {
		out, err := exec.Command(rabbitmqctl, "eval", expr).CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqctl eval %s: %v: %s", expr, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	orig := eval("application:get_env(rabbit, max_message_size).") // {ok,134217728}
	n, ok := strings.CutPrefix(strings.TrimSuffix(orig, "}"), "{ok,")
	if _, err := strconv.Atoi(n); !ok || err != nil {
		t.Fatalf("cannot read the broker's max_message_size: %q", orig)
	}
	// Channels read the limit when they open; only this test's publisher
	// opens one with it, and every other test here stays far below 1 MiB.
	eval(fmt.Sprintf("application:set_env(rabbit, max_message_size, %d).", 1<<20))
	t.Cleanup(func() { eval(fmt.Sprintf("application:set_env(rabbit, max_message_size, %s).", n)) })

	a := newAdmin(t)
	ex := a.exchange()
	r := a.reader(a.queue(ex, nil, "#"))
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: ex, MaxMessageSize: 4 << 20})
	batch := msgs(3, "order.created")
	batch[1].Payload = publishertest.JSONOfSize(2 << 20)
	errs := pub.PublishBatch(ctxFor(t, 30*time.Second), batch)
	t.Logf("results: %v", errs)
	if outbox.Classify(errs[1]) != outbox.ClassPermanent {
		t.Errorf("message over the broker's limit: %v (%s), want permanent", errs[1], outbox.Classify(errs[1]))
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil && outbox.Classify(errs[i]) != outbox.ClassUnavailable {
			t.Errorf("neighbour %d: %v (%s), want published or unavailable", i, errs[i], outbox.Classify(errs[i]))
		}
	}
	retry := []*outbox.Message{batch[0], batch[2]}
	for i, err := range pub.PublishBatch(ctxFor(t, 30*time.Second), retry) {
		if err != nil {
			t.Fatalf("neighbour %d re-published: %v", i, err)
		}
	}
	ds, err := r.deliveries(ctxFor(t, 10*time.Second), 2)
	if err != nil {
		t.Fatal(err)
	}
	if byID(ds)[batch[1].ID.String()] > 0 {
		t.Error("the refused message is in the queue")
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange()
	u, proxy := viaProxy(t)
	pub := newPublisher(t, rabbitmq.Config{URL: u, Exchange: ex})
	if err := pub.Health(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Health with the broker up: %v", err)
	}
	proxy.Cut()
	if err := pub.Health(ctxFor(t, 10*time.Second)); err == nil {
		t.Error("Health is nil with the broker cut off")
	}
	proxy.Restore()
	var err error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Health: %v", err) }), 10*time.Second,
		"Health after restore", func() bool { err = pub.Health(ctxFor(t, 10*time.Second)); return err == nil })

	missing := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: uniqueName("missing")})
	if err := missing.Health(ctxFor(t, 10*time.Second)); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Health with a missing exchange: %v, want the broker's 404", err)
	}
}

func TestDeclareExchangeIsOptIn(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName("declared")
	t.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })

	plain := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: name})
	if err := plain.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`)); err == nil {
		t.Fatal("publish to a missing exchange succeeded")
	}
	if a.exchangeExists(name) {
		t.Fatal("the publisher declared an exchange without being asked to")
	}
	declaring := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: name, DeclareExchange: "topic"})
	if err := declaring.Health(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !a.exchangeExists(name) {
		t.Fatal("DeclareExchange did not declare the exchange")
	}
	// Declared with no queue bound: unroutable, not lost.
	if err := declaring.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`)); !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Fatalf("publish to the declared, unbound exchange: %v, want ErrUnroutable", err)
	}
}

func TestCloseFailsLaterPublishesAsUnavailable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: a.exchange()})
	if err := pub.Health(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`))
	if !errors.Is(err, rabbitmq.ErrClosed) || outbox.Classify(err) != outbox.ClassUnavailable {
		t.Fatalf("publish after Close: %v, want an unavailable ErrClosed", err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestPasswordNeverInErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error shows the password: %v", what, err)
		}
	}
	u, _ := url.Parse("amqp://user:" + secret + "@" + closedPort(t) + "/?exchange=x")
	pub, err := rabbitmq.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`))
	check("publish to a closed port", err)
	if outbox.Classify(err) != outbox.ClassUnavailable {
		t.Errorf("publish to a closed port: %v (%s), want unavailable", err, outbox.Classify(err))
	}
	if !strings.Contains(err.Error(), "xxxxx") {
		t.Errorf("publish to a closed port: %v, want the redacted URL", err)
	}
	check("Health on a closed port", pub.Health(ctxFor(t, 10*time.Second)))

	_, err = rabbitmq.New(rabbitmq.Config{URL: "amqp://user:" + secret + "@host:port/"})
	check("New with a bad port", err)
	_, err = rabbitmq.New(rabbitmq.Config{URL: "amqp://user:" + secret + "@host/ x"})
	check("New with whitespace", err)
	u, _ = url.Parse("amqp://user:" + secret + "@host/?exchnage=typo")
	_, err = rabbitmq.NewFromURL(u)
	check("NewFromURL with an unknown option", err)

	// Wrong credentials: the broker refuses the connection.
	bad, _ := url.Parse(brokerURL())
	bad.User = url.UserPassword("guest", secret)
	pub, err = rabbitmq.NewFromURL(bad)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`))
	check("publish with a wrong password", err)
	if outbox.Classify(err) != outbox.ClassUnavailable {
		t.Errorf("publish with a wrong password: %v (%s), want unavailable", err, outbox.Classify(err))
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	parse := func(s string) (rabbitmq.Config, error) {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return rabbitmq.ParseURL(u)
	}
	cfg, err := parse("amqps://u:p@broker:5671/prod?exchange=events&routing_key=orders.{event_type}&declare_exchange=topic&max_message_size=1048576&dial_timeout=3s&connection_name=relay-1&heartbeat=5")
	if err != nil {
		t.Fatal(err)
	}
	want := rabbitmq.Config{
		URL: "amqps://u:p@broker:5671/prod?heartbeat=5", Exchange: "events", RoutingKey: "orders.{event_type}",
		DeclareExchange: "topic", MaxMessageSize: 1 << 20, DialTimeout: 3 * time.Second, ConnectionName: "relay-1",
	}
	if fmt.Sprint(cfg) != fmt.Sprint(want) {
		t.Errorf("ParseURL =\n %+v\nwant\n %+v", cfg, want)
	}
	cfg, err = parse("amqp://127.0.0.1/")
	if err != nil || cfg.URL != "amqp://127.0.0.1/" || cfg.Exchange != "" || cfg.RoutingKey != "" {
		t.Errorf("ParseURL without options = %+v, %v", cfg, err)
	}
	for _, bad := range []string{
		"http://127.0.0.1/",
		"amqp://127.0.0.1/?max_message_size=big",
		"amqp://127.0.0.1/?max_message_size=-1",
		"amqp://127.0.0.1/?dial_timeout=5",
		"amqp://127.0.0.1/?exchange=a&exchange=b",
		"amqp://127.0.0.1/?routingkey={event_type}",
		"amqp://127.0.0.1/?cacertfile=/etc/ssl/certs/ca-certificates.crt",
		"amqps://127.0.0.1/?certfile=/nonexistent.pem&keyfile=/nonexistent-key.pem",
		"amqps://127.0.0.1/?certfile=/etc/ssl/certs/ca-certificates.crt",
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("ParseURL(%q) accepted", bad)
		}
	}
	// A bad template or exchange kind is caught by New.
	for _, bad := range []string{
		"amqp://127.0.0.1/?routing_key={nope}",
		"amqp://127.0.0.1/?exchange=x&declare_exchange=nonsense",
		"amqp://127.0.0.1/?declare_exchange=topic",
	} {
		u, _ := url.Parse(bad)
		if _, err := rabbitmq.NewFromURL(u); err == nil {
			t.Errorf("NewFromURL(%q) accepted", bad)
		}
	}
}

// TestConfigValidation: New refuses a bad field with a *outbox.ConfigError
// naming rabbitmq.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   rabbitmq.Config
		field string
	}{
		{rabbitmq.Config{RoutingKey: "{unknown}"}, "RoutingKey"},
		{rabbitmq.Config{Exchange: strings.Repeat("x", 256)}, "Exchange"},
		{rabbitmq.Config{Exchange: "x", DeclareExchange: "queue"}, "DeclareExchange"},
		{rabbitmq.Config{DeclareExchange: "topic"}, "DeclareExchange"},
		{rabbitmq.Config{MaxMessageSize: -1}, "MaxMessageSize"},
		{rabbitmq.Config{DialTimeout: -time.Second}, "DialTimeout"},
		{rabbitmq.Config{Heartbeat: time.Millisecond}, "Heartbeat"},
		{rabbitmq.Config{URL: "redis://127.0.0.1/"}, "URL"},
		{rabbitmq.Config{URL: "amqp://h:port/"}, "URL"},
	} {
		_, err := rabbitmq.New(c.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", c.cfg), err, "rabbitmq.Config", c.field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultURL":                  rabbitmq.DefaultURL,
		"DefaultMaxMessageSize":       rabbitmq.DefaultMaxMessageSize,
		"DefaultDialTimeout":          rabbitmq.DefaultDialTimeout,
		"DefaultHeartbeat":            rabbitmq.DefaultHeartbeat,
		"DefaultConnectionName":       rabbitmq.DefaultConnectionName,
		"outbox.DefaultTopicTemplate": outbox.DefaultTopicTemplate,
	})
}

// fullQueue returns a publisher to a queue at its x-max-length with
// x-overflow=reject-publish, which nacks every message, and a function that
// replaces it with a queue without limit.
func fullQueue(t *testing.T, a *admin, u string) (outbox.Publisher, func()) {
	t.Helper()
	q := a.queue("", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	if err := a.ch.Publish("", q, false, false, amqp.Publishing{Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, rabbitmq.Config{URL: u, RoutingKey: q})
	return pub, func() {
		if _, err := a.ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("delete the full queue: %v", err)
		}
		if _, err := a.ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Errorf("declare the queue again without limit: %v", err)
		}
	}
}
