package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/pubsub"
)

const project = "pgoutbox-test"

// refuser is a pstest reactor: while set, it answers each Publish request
// for which its function returns an error with that error.
type refuser struct {
	fn atomic.Pointer[func(*pb.PublishRequest) error]
}

func (r *refuser) React(req any) (bool, any, error) {
	if f := r.fn.Load(); f != nil {
		if err := (*f)(req.(*pb.PublishRequest)); err != nil {
			return true, nil, err
		}
	}
	return false, nil, nil
}

// refuse makes every request fail with err, until restore.
func (r *refuser) refuse(err error) (restore func()) {
	return r.refuseIf(func(*pb.PublishRequest) error { return err })
}

func (r *refuser) refuseIf(f func(*pb.PublishRequest) error) (restore func()) {
	r.fn.Store(&f)
	return func() { r.fn.Store(nil) }
}

// env is one test's Pub/Sub: the official fake (pstest, the real gRPC API on
// a loopback port), reached by the publisher through a TCP proxy the test can
// cut, and a consumer client that bypasses the proxy.
type env struct {
	t        *testing.T
	srv      *pstest.Server
	proxy    *tcpproxy.Proxy
	refuser  *refuser
	client   *gpubsub.Client // through the proxy
	consumer *gpubsub.Client // straight to the fake
}

func newEnv(t *testing.T) *env {
	t.Helper()
	r := &refuser{}
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: r})
	t.Cleanup(func() { _ = srv.Close() })
	p := tcpproxy.Start(t, srv.Addr)
	return &env{t: t, srv: srv, proxy: p, refuser: r, client: newClient(t, p.Addr()), consumer: newClient(t, srv.Addr)}
}

// newClient is a client for the emulator at addr, made as Dial makes it.
func newClient(t *testing.T, addr string) *gpubsub.Client {
	t.Helper()
	c, err := gpubsub.NewClient(context.Background(), project, pubsub.DialConfig{Emulator: addr}.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func topicName(id string) string { return "projects/" + project + "/topics/" + id }

// createTopic creates a topic and a subscription to it (message ordering
// on), and returns the subscription's name.
func (e *env) createTopic(id string) string {
	e.t.Helper()
	ctx := timeout(e.t, 10*time.Second)
	if _, err := e.consumer.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: topicName(id)}); err != nil {
		e.t.Fatalf("create topic %s: %v", id, err)
	}
	sub := "projects/" + project + "/subscriptions/" + id + "-sub"
	if _, err := e.consumer.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{
		Name: sub, Topic: topicName(id), AckDeadlineSeconds: 10, EnableMessageOrdering: true,
	}); err != nil {
		e.t.Fatalf("create subscription: %v", err)
	}
	return sub
}

func (e *env) publisher(cfg pubsub.Config) *pubsub.Publisher {
	e.t.Helper()
	if cfg.Client == nil {
		cfg.Client = e.client
	}
	p, err := pubsub.New(cfg)
	if err != nil {
		e.t.Fatalf("pubsub.New: %v", err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p
}

type received struct {
	publishertest.Received
	ID string // Pub/Sub's message id
}

// reader consumes a subscription like an application: pull, remember,
// acknowledge. It keeps what it consumed, so every Read returns all messages
// so far.
type reader struct {
	e     *env
	sub   string
	topic string
	mu    sync.Mutex
	got   []received
	seen  map[string]bool // Pub/Sub message ids: Pub/Sub may deliver one twice
}

func (r *reader) Read(ctx context.Context, n int) ([]received, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.got) < n {
		if err := ctx.Err(); err != nil {
			return slices.Clone(r.got), err
		}
		resp, err := r.e.consumer.SubscriptionAdminClient.Pull(ctx, &pb.PullRequest{Subscription: r.sub, MaxMessages: 100})
		if err != nil {
			return slices.Clone(r.got), err
		}
		var ack []string
		for _, m := range resp.ReceivedMessages {
			ack = append(ack, m.AckId)
			if r.seen == nil {
				r.seen = map[string]bool{}
			}
			if r.seen[m.Message.MessageId] {
				continue
			}
			r.seen[m.Message.MessageId] = true
			r.got = append(r.got, received{Received: publishertest.Received{
				Topic: r.topic, Key: m.Message.OrderingKey, Headers: m.Message.Attributes, Payload: m.Message.Data,
			}, ID: m.Message.MessageId})
		}
		if len(ack) > 0 {
			if err := r.e.consumer.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: r.sub, AckIds: ack}); err != nil {
				return slices.Clone(r.got), err
			}
		}
	}
	return slices.Clone(r.got), nil
}

func (r *reader) conformance(ctx context.Context, n int) ([]publishertest.Received, error) {
	got, err := r.Read(ctx, n)
	out := make([]publishertest.Received, len(got))
	for i, g := range got {
		out[i] = g.Received
	}
	return out, err
}

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		e := newEnv(t)
		sub := e.createTopic("order.created")
		return &publishertest.Broker{
			Publisher:      e.publisher(pubsub.Config{PublishTimeout: 3 * time.Second}),
			Unroutable:     e.publisher(pubsub.Config{Topic: "missing.{event_type}"}),
			UnroutableName: "gcloud pubsub topics create missing.order.created",
			RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
				// A quota exhausted: every request refused alike.
				return e.publisher(pubsub.Config{PublishTimeout: 2 * time.Second}), e.refuser.refuse(status.Error(codes.ResourceExhausted, "quota exceeded"))
			},
			MaxPayload: pubsub.MaxMessageBytesLimit + 1,
			KeyOf:      func(m *outbox.Message) string { return m.AggregateID },
			Read:       (&reader{e: e, sub: sub, topic: "order.created"}).conformance,
			Disconnect: func(t *testing.T) func() {
				e.proxy.Cut()
				return e.proxy.Restore
			},
			CloudEvents: &publishertest.CloudEvents{Prefix: pubsub.AttrCloudEventsPrefix, ContentType: pubsub.AttrContentType},
		}
	})
}

func message(agg string, i int) *outbox.Message {
	return publishertest.NewMessage(agg, fmt.Sprintf(`{"agg":%q,"i":%d}`, agg, i))
}

func publishOK(t *testing.T, p *pubsub.Publisher, msgs []*outbox.Message) {
	t.Helper()
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// One aggregate's events keep their order under their ordering key, across
// interleaved aggregates in one batch.
func TestOrderingKeyKeepsAggregateOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.createTopic("order.created")
	p := e.publisher(pubsub.Config{})
	aggs := []string{"a-1", "b-2", "c-3"}
	var msgs []*outbox.Message
	for i := range 20 {
		for _, a := range aggs {
			msgs = append(msgs, message(a, i))
		}
	}
	publishOK(t, p, msgs)
	got, err := (&reader{e: e, sub: sub, topic: "order.created"}).Read(timeout(t, 30*time.Second), len(msgs))
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{}
	for i, m := range msgs {
		idx[m.ID.String()] = i
	}
	last := map[string]int{}
	for _, r := range got {
		if r.Key != r.Headers[outbox.HeaderAggregateID] {
			t.Errorf("ordering key %q, aggregate %q", r.Key, r.Headers[outbox.HeaderAggregateID])
		}
		i := idx[r.Headers[outbox.HeaderEventID]]
		if prev, ok := last[r.Key]; ok && i < prev {
			t.Errorf("aggregate %s: event %d delivered after event %d", r.Key, i, prev)
		}
		last[r.Key] = i
	}
}

// A failed request pauses its ordering key in the client: the aggregate's
// next event would fail without a request, forever, unless the publisher
// resumes the key.
func TestFailureDoesNotPauseTheKeyForLaterBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.createTopic("order.created")
	p := e.publisher(pubsub.Config{PublishTimeout: time.Second})
	restore := e.refuser.refuse(status.Error(codes.Internal, "backend error"))
	err := p.Publish(timeout(t, 30*time.Second), message("agg-1", 1))
	if err == nil {
		t.Fatal("publish while the service fails: nil error")
	}
	restore()
	// The resume happens once every message of the key has its result,
	// which it has: the next batch goes out.
	var next error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Publish: %v (its ordering key stayed paused)", next) }), 10*time.Second,
		"the aggregate's next event published after a failure", func() bool {
			next = p.Publish(timeout(t, 30*time.Second), message("agg-1", 2))
			return next == nil
		})
	if _, err := (&reader{e: e, sub: sub, topic: "order.created"}).Read(timeout(t, 30*time.Second), 1); err != nil {
		t.Fatal(err)
	}
}

// In one batch, once an aggregate's request failed its later events are held
// back by the client and fail too, never sent (none overtakes it), with the
// failure that held them back named; other aggregates go on.
func TestHeldBackBehindAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("order.created")
	p := e.publisher(pubsub.Config{PublishTimeout: time.Second})
	// Payloads over half the client's 1 MB request threshold: each message
	// goes in a request of its own, one after another for one key.
	big := func(agg string, i int) *outbox.Message {
		m := message(agg, i)
		m.Payload = fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("x", 600<<10))
		return m
	}
	e.refuser.refuseIf(func(req *pb.PublishRequest) error {
		for _, m := range req.Messages {
			if strings.HasPrefix(string(m.Data), `{"i":1,`) {
				return status.Error(codes.InvalidArgument, "message failed schema validation")
			}
		}
		return nil
	})
	// Requests of agg-1: events 1 and 2 (1.2 MB reach the threshold), then
	// event 3.
	msgs := []*outbox.Message{big("agg-1", 1), big("agg-1", 2), big("agg-1", 3), message("agg-2", 1)}
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	if c := outbox.Classify(errs[0]); errs[0] == nil || c != outbox.ClassPermanent {
		t.Errorf("the invalid event: %v (%s), want permanent", errs[0], c)
	}
	for _, i := range []int{1, 2} {
		if c := outbox.Classify(errs[i]); errs[i] == nil || c != outbox.ClassTransient ||
			!strings.Contains(errs[i].Error(), `earlier event of ordering key "agg-1" failed`) {
			t.Errorf("event %d behind it: %v (%s), want transient, held back", i+1, errs[i], c)
		}
	}
	if errs[3] != nil {
		t.Errorf("another aggregate's event: %v", errs[3])
	}
	for _, m := range e.srv.Messages() {
		if id := m.Attributes[outbox.HeaderEventID]; id == msgs[1].ID.String() || id == msgs[2].ID.String() {
			t.Errorf("event %s reached Pub/Sub ahead of the earlier one that failed", id)
		}
	}
}

// One message Pub/Sub refuses as invalid does not fail the healthy ones sent
// in the same request: the publisher sends them again alone.
func TestInvalidRequestRetriedAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.createTopic("order.created")
	p := e.publisher(pubsub.Config{DisableOrdering: true})
	msgs := []*outbox.Message{message("1", 1), message("2", 2), message("3", 3)}
	msgs[1].Payload = []byte(`{"poison":true}`)
	// The first request (all three) is refused as invalid; alone, only the
	// poison message is.
	e.refuser.refuseIf(func(req *pb.PublishRequest) error {
		for _, m := range req.Messages {
			if strings.Contains(string(m.Data), "poison") {
				return status.Error(codes.InvalidArgument, "message failed schema validation")
			}
		}
		return nil
	})
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("healthy messages beside an invalid one: %v, %v; want both published", errs[0], errs[2])
	}
	if c := outbox.Classify(errs[1]); c != outbox.ClassPermanent {
		t.Fatalf("the invalid message: %v (%s), want permanent", errs[1], c)
	}
	got, err := (&reader{e: e, sub: sub, topic: "order.created"}).Read(timeout(t, 30*time.Second), 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("read %d messages: %v", len(got), err)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted, codes.FailedPrecondition, codes.Unavailable} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.createTopic("order.created")
			e.refuser.refuse(status.Error(code, "refused"))
			err := e.publisher(pubsub.Config{PublishTimeout: time.Second}).Publish(timeout(t, 30*time.Second), message("1", 1))
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Fatalf("%s: %v (%s), want unavailable", code, err, outbox.Classify(err))
			}
		})
	}
}

func TestCreateTopics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(pubsub.Config{Topic: "created-{aggregate_type}", CreateTopics: true})
	msgs := []*outbox.Message{message("a", 1), message("a", 2), message("b", 1)}
	publishOK(t, p, msgs)
	if _, err := e.consumer.TopicAdminClient.GetTopic(timeout(t, 10*time.Second), &pb.GetTopicRequest{Topic: topicName("created-order")}); err != nil {
		t.Fatalf("the topic was not created: %v", err)
	}
	n := 0
	for _, m := range e.srv.Messages() {
		if m.Topic == topicName("created-order") {
			n++
		}
	}
	if n != len(msgs) {
		t.Fatalf("%d messages on the created topic, want %d", n, len(msgs))
	}
}

func TestPermanentBeforeSending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("order.created")
	p := e.publisher(pubsub.Config{})
	for name, edit := range map[string]func(m *outbox.Message){
		"topic with a space":    func(m *outbox.Message) { m.EventType = "order created" },
		"topic starting goog":   func(m *outbox.Message) { m.EventType = "google.x" },
		"header value too long": func(m *outbox.Message) { m.Headers["big"] = strings.Repeat("x", 1025) },
		"reserved header name":  func(m *outbox.Message) { m.Headers["googclient_x"] = "1" },
		"ordering key too long": func(m *outbox.Message) { m.AggregateID = strings.Repeat("k", 1025) },
		"too many headers": func(m *outbox.Message) {
			for i := range 100 {
				m.Headers[fmt.Sprint("h", i)] = "v"
			}
		},
	} {
		m := message("1", 1)
		edit(m)
		if err := p.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) {
			t.Errorf("%s: %v, want a permanent error", name, err)
		}
	}
	if n := len(e.srv.Messages()); n != 0 {
		t.Errorf("%d messages reached the fake, want none", n)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("orders")
	if err := e.publisher(pubsub.Config{Topic: "orders"}).Health(timeout(t, 10*time.Second)); err != nil {
		t.Errorf("Health: %v", err)
	}
	if err := e.publisher(pubsub.Config{Topic: "nope"}).Health(timeout(t, 10*time.Second)); err == nil {
		t.Error("Health of a missing topic = nil")
	}
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming pubsub.Config and the field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		cfg   pubsub.Config
		field string
	}{
		{pubsub.Config{Client: nil}, "Client"},
		{pubsub.Config{Client: e.client, Topic: "{nope}"}, "Topic"},
		{pubsub.Config{Client: e.client, Topic: "x"}, "Topic"},
		{pubsub.Config{Client: e.client, Topic: "projects/p/subs/x"}, "Topic"},
		{pubsub.Config{Client: e.client, PublishTimeout: time.Millisecond}, "PublishTimeout"},
		{pubsub.Config{Client: e.client, MaxMessageBytes: 20_000_000}, "MaxMessageBytes"},
	} {
		_, err := pubsub.New(tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "pubsub.Config", tc.field)
	}
	_, err := pubsub.Dial(t.Context(), pubsub.DialConfig{}, pubsub.Config{})
	configcheck.Refused(t, "Dial", err, "pubsub.DialConfig", "Project")
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultPublishTimeout":       pubsub.DefaultPublishTimeout,
		"DefaultMaxMessageBytes":      pubsub.DefaultMaxMessageBytes,
		"outbox.DefaultTopicTemplate": outbox.DefaultTopicTemplate,
	})
}

func TestNewFromURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.createTopic("orders")
	u, _ := url.Parse("pubsub://" + project + "/orders?emulator=" + e.srv.Addr + "&publish_timeout=5s&ordering=false")
	p, err := pubsub.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(timeout(t, 30*time.Second), message("1", 1)); err != nil {
		t.Fatal(err)
	}
	got, err := (&reader{e: e, sub: sub, topic: "orders"}).Read(timeout(t, 30*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Key != "" {
		t.Errorf("ordering=false: ordering key %q, want none", got[0].Key)
	}

	for _, s := range []string{
		"pubsub://",
		"pubsub://p/orders?topic=x",
		"pubsub://p/orders?nope=1",
		"pubsub://p/orders?emulator=nohost",
		"pubsub://p/orders?emulator=h:1&endpoint=h:2",
		"pubsub://p/orders?publish_timeout=soon",
		"pubsub://p/orders?ordering=maybe",
		"pubsub://user:s3cret@p/orders",
		"nats://p/orders",
	} {
		u, _ := url.Parse(s)
		if _, _, err := pubsub.ParseURL(u); err == nil {
			t.Errorf("ParseURL(%s) = nil error", u.Redacted())
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error repeats the password: %v", err)
		}
	}
	u, _ = url.Parse("pubsub://p?topic=orders-{aggregate_type}&create_topics=true&max_message_bytes=2048")
	dc, cfg, err := pubsub.ParseURL(u)
	if err != nil || dc.Project != "p" || cfg.Topic != "orders-{aggregate_type}" || !cfg.CreateTopics || cfg.MaxMessageBytes != 2048 {
		t.Errorf("ParseURL(%s) = %+v, %+v, %v", u, dc, cfg, err)
	}
}
