package kafka_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testcerts"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/publishertest"
)

// cluster is one test's in-process Kafka (kfake speaks the real protocol on
// a loopback TCP port) reached through a TCP proxy the test can cut.
type cluster struct {
	c     *kfake.Cluster
	proxy *tcpproxy.Proxy
	addr  string // the proxy's: the address the broker advertises
	// readOpts are the reading client's extra options (TLS, SASL).
	readOpts []kgo.Opt
}

// advertised is kfake's listener reporting the proxy's address, which kfake
// then advertises in its metadata, so clients never bypass the proxy.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (l advertised) Addr() net.Addr { return l.addr }

func newCluster(t *testing.T, opts ...kfake.Opt) *cluster {
	t.Helper()
	var proxy *tcpproxy.Proxy
	opts = append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			proxy = tcpproxy.Start(t, ln.Addr().String())
			addr, err := net.ResolveTCPAddr("tcp", proxy.Addr())
			return advertised{ln, addr}, err
		}),
	}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &cluster{c: c, proxy: proxy, addr: c.ListenAddrs()[0]}
}

func newPublisher(t *testing.T, cfg kafka.Config) *kafka.Publisher {
	t.Helper()
	p, err := kafka.New(cfg)
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

type received struct {
	publishertest.Received
	Partition int32
	Offset    int64
}

// read consumes topic from the start until it has n records or ctx ends.
func (c *cluster) read(ctx context.Context, topic string, n int) ([]received, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, c.readOpts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []received
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		for _, e := range fs.Errors() {
			return out, fmt.Errorf("fetch %s[%d]: %w", e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			out = append(out, received{
				Received:  publishertest.Received{Topic: r.Topic, Key: string(r.Key), Headers: h, Payload: r.Value},
				Partition: r.Partition, Offset: r.Offset,
			})
		})
	}
	return out, nil
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

const maxMessageBytes = 64 << 10 // the test clusters' message.max.bytes

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		c := newCluster(t, kfake.SeedTopics(4, "order.created"),
			kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(maxMessageBytes)}))
		// MaxMessageBytes matches the topic's limit, as the docs ask: the
		// client then refuses an oversized record by its uncompressed size
		// (the broker only sees the compressed batch).
		cfg := kafka.Config{Brokers: []string{c.addr}, DeliveryTimeout: 3 * time.Second, MaxMessageBytes: maxMessageBytes}
		pub := newPublisher(t, cfg)
		cfg.Topic = "missing.{event_type}"
		unroutable := newPublisher(t, cfg)
		return &publishertest.Broker{
			Publisher:      pub,
			Unroutable:     unroutable,
			UnroutableName: "missing.order.created",
			RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
				return pub, c.refuse(kerr.NotEnoughReplicas)
			},
			MaxPayload: maxMessageBytes + 1,
			KeyOf:      func(m *outbox.Message) string { return m.AggregateID },
			Read: func(ctx context.Context, n int) ([]publishertest.Received, error) {
				got, err := c.read(ctx, "order.created", n)
				out := make([]publishertest.Received, len(got))
				for i, r := range got {
					out[i] = r.Received
				}
				return out, err
			},
			Disconnect: func(t *testing.T) func() {
				c.proxy.Cut()
				return c.proxy.Restore
			},
			CloudEvents: &publishertest.CloudEvents{Prefix: "ce_", ContentType: "content-type"},
		}
	})
}

func message(agg string, i int) *outbox.Message {
	return publishertest.NewMessage(agg, fmt.Sprintf(`{"agg":%q,"i":%d}`, agg, i))
}

func publishOK(t *testing.T, p *kafka.Publisher, msgs []*outbox.Message) {
	t.Helper()
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func TestSameAggregateSamePartitionInOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(8, "order.created"))
	p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}})
	aggs := []string{"a-1", "b-2", "c-3", "d-4"}
	const each = 30
	var msgs []*outbox.Message
	for i := range each { // interleaved, as the relay's batches are
		for _, a := range aggs {
			msgs = append(msgs, message(a, i))
		}
	}
	publishOK(t, p, msgs)

	got, err := c.read(timeout(t, 30*time.Second), "order.created", len(msgs))
	if err != nil {
		t.Fatalf("read %d of %d: %v", len(got), len(msgs), err)
	}
	idx := map[string]int{} // event id -> publish order
	for i, m := range msgs {
		idx[m.ID.String()] = i
	}
	partOf := map[string]int32{}
	last := map[string]int{} // aggregate -> last publish index seen, in offset order
	partitions := map[int32]bool{}
	// Records arrive per partition in offset order.
	for _, r := range got {
		agg := r.Headers[outbox.HeaderAggregateID]
		if r.Key != agg {
			t.Fatalf("record key %q, want the aggregate id %q", r.Key, agg)
		}
		if p, ok := partOf[agg]; ok && p != r.Partition {
			t.Fatalf("aggregate %s on partitions %d and %d", agg, p, r.Partition)
		}
		partOf[agg] = r.Partition
		partitions[r.Partition] = true
		i, ok := idx[r.Headers[outbox.HeaderEventID]]
		if !ok {
			t.Fatalf("unknown event %s", r.Headers[outbox.HeaderEventID])
		}
		if prev, ok := last[agg]; ok && i < prev {
			t.Fatalf("aggregate %s: event published %dth is stored after the %dth", agg, i, prev)
		}
		last[agg] = i
	}
	if len(partOf) != len(aggs) {
		t.Fatalf("saw %d aggregates, want %d", len(partOf), len(aggs))
	}
	t.Logf("%d aggregates over %d partitions", len(aggs), len(partitions))
}

func TestMessageTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "order.created", "order.mixed"),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "16384"}))
	// Incompressible: the broker checks the compressed batch's size.
	noise := make([]byte, 15000)
	_, _ = rand.Read(noise)
	big := publishertest.NewMessage("1", `{"x":"`+base64.StdEncoding.EncodeToString(noise)+`"}`)

	t.Run("broker rejects", func(t *testing.T) {
		// The client's cap (Kafka's default) is above the broker's: the
		// broker answers MESSAGE_TOO_LARGE.
		p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}})
		err := p.Publish(timeout(t, 30*time.Second), big)
		if !errors.Is(err, outbox.ErrPermanent) || !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("err = %v, want permanent MESSAGE_TOO_LARGE", err)
		}
	})
	t.Run("broker rejects the batch, others still delivered", func(t *testing.T) {
		// The client's cap is Kafka's default, above the topic's limit: the
		// big record goes out in one record batch with the small ones and
		// the broker refuses the whole batch. The small ones must still get
		// through, in order; only the big one is a permanent failure.
		topic := "order.mixed"
		p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}, Topic: topic})
		var msgs []*outbox.Message
		for i := range 5 {
			msgs = append(msgs, message("2", i))
		}
		msgs = append(msgs[:2], append([]*outbox.Message{big}, msgs[2:]...)...)
		errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
		for i, err := range errs {
			switch {
			case msgs[i] == big:
				if !errors.Is(err, outbox.ErrPermanent) || !errors.Is(err, kerr.MessageTooLarge) {
					t.Errorf("big message: err = %v, want permanent MESSAGE_TOO_LARGE", err)
				}
			case err != nil:
				t.Errorf("small message %d: %v", i, err)
			}
		}
		got, err := c.read(timeout(t, 30*time.Second), topic, 5)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var order []string
		for _, r := range got {
			order = append(order, r.Headers[outbox.HeaderEventID])
		}
		var want []string
		for _, m := range msgs {
			if m != big {
				want = append(want, m.ID.String())
			}
		}
		if fmt.Sprint(order) != fmt.Sprint(want) {
			t.Errorf("topic holds %v, want the small messages in order %v", order, want)
		}
	})
	t.Run("client rejects, others unaffected", func(t *testing.T) {
		p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}, MaxMessageBytes: 16384})
		msgs := []*outbox.Message{message("1", 1), big, message("1", 2)}
		errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("small messages failed: %v, %v", errs[0], errs[2])
		}
		if !errors.Is(errs[1], outbox.ErrPermanent) || !errors.Is(errs[1], kerr.MessageTooLarge) {
			t.Fatalf("big message: err = %v, want permanent MESSAGE_TOO_LARGE", errs[1])
		}
		got, err := c.read(timeout(t, 30*time.Second), "order.created", 2)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		for _, r := range got {
			if r.Headers[outbox.HeaderEventID] == big.ID.String() {
				t.Fatal("the rejected message is on the topic")
			}
		}
	})
}

// An unknown topic is a missing destination: every event for it would fail
// alike, so it is an outage naming the topic and the command creating it.
func TestUnknownTopicIsUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "order.created")) // auto-create is off
	p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}, Topic: "nope.{event_type}"})
	start := time.Now()
	err := p.Publish(timeout(t, 30*time.Second), message("1", 1))
	var missing kafka.MissingTopicError
	if outbox.Classify(err) != outbox.ClassUnavailable || !errors.Is(err, kerr.UnknownTopicOrPartition) ||
		!errors.As(err, &missing) || missing.Topic != "nope.order.created" || !strings.Contains(err.Error(), "kafka-topics.sh") {
		t.Fatalf("err = %v, want an unavailable MissingTopicError naming nope.order.created and the command", err)
	}
	t.Logf("unknown topic reported after %s", time.Since(start).Round(time.Millisecond))
}

// With CreateTopics the publisher creates the unknown topic and produces the
// refused records again, in order.
func TestCreateTopics(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "order.created"))
	u, _ := url.Parse("kafka://" + c.addr + "?topic=made.{event_type}&create_topics=true&topic_partitions=3")
	p, err := kafka.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	msgs := []*outbox.Message{message("a", 1), message("a", 2), message("a", 3)}
	publishOK(t, p, msgs)
	got, err := c.read(timeout(t, 30*time.Second), "made.order.created", 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r.Headers[outbox.HeaderEventID] != msgs[i].ID.String() {
			t.Fatalf("record %d is event %s, want %s (order kept)", i, r.Headers[outbox.HeaderEventID], msgs[i].ID)
		}
	}
}

// A cluster that refuses every produce for a reason of its own (too few
// in-sync replicas, a revoked ACL, leaders moving) is an outage, not a
// property of the records: no attempt may be counted.
func TestRefusalsAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, code := range []error{kerr.NotEnoughReplicas, kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.NotLeaderForPartition, kerr.KafkaStorageError} {
		t.Run(code.(*kerr.Error).Message, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kfake.SeedTopics(1, "order.created"))
			p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}, DeliveryTimeout: time.Second})
			defer c.refuse(code)()
			for i, err := range p.PublishBatch(timeout(t, 30*time.Second), []*outbox.Message{message("a", 1), message("b", 1)}) {
				if outbox.Classify(err) != outbox.ClassUnavailable {
					t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
				}
			}
		})
	}
}

// refuse makes every produce request fail with code, for every partition,
// until the returned function is called.
func (c *cluster) refuse(code error) (restore func()) {
	var done atomic.Bool
	c.c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if done.Load() {
			c.c.DropControl()
			return nil, nil, false
		}
		c.c.KeepControl()
		preq := req.(*kmsg.ProduceRequest)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range preq.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = code.(*kerr.Error).Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return func() { done.Store(true) }
}

// SASL PLAIN and SCRAM credentials from the URL; a wrong password fails
// every message alike, so it is unavailable, never a dead letter.
func TestSASL(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "order.created"), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "outbox", "right"), kfake.Superuser("SCRAM-SHA-256", "scram", "right"))
	for _, tc := range []struct {
		url  string
		want outbox.ErrorClass
		ok   bool
	}{
		{"kafka://outbox:right@" + c.addr + "?sasl=plain&delivery_timeout=2s", 0, true},
		{"kafka://scram:right@" + c.addr + "?sasl=scram-sha-256&delivery_timeout=2s", 0, true},
		{"kafka://outbox:wrong@" + c.addr + "?sasl=plain&delivery_timeout=2s", outbox.ClassUnavailable, false},
	} {
		u, _ := url.Parse(tc.url)
		p, err := kafka.NewFromURL(u)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Publish(timeout(t, 30*time.Second), message("1", 1))
		p.Close()
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", u.Redacted(), err)
		case !tc.ok && (err == nil || outbox.Classify(err) != tc.want):
			t.Errorf("%s: %v (%s), want %s", u.Redacted(), err, outbox.Classify(err), tc.want)
		}
	}
}

func TestInvalidTopicNameIsPermanent(t *testing.T) {
	t.Parallel()
	// Nothing listens here: the name is refused before any network use.
	p := newPublisher(t, kafka.Config{Brokers: []string{"127.0.0.1:1"}})
	m := message("1", 1)
	m.EventType = "order created"
	err := p.Publish(timeout(t, 5*time.Second), m)
	if !errors.Is(err, outbox.ErrPermanent) || !strings.Contains(err.Error(), "order created") {
		t.Fatalf("err = %v, want a permanent error naming the topic", err)
	}
}

func TestClusterDownIsUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("closed cluster", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t, kfake.SeedTopics(2, "order.created"))
		p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}, DeliveryTimeout: 2 * time.Second})
		publishOK(t, p, []*outbox.Message{message("1", 1)}) // connected, metadata loaded
		c.c.Close()
		// kfake keeps its client connections open after Close, so the
		// produce request is written and never answered: the idempotent
		// producer cannot fail it safely and the caller's deadline (the
		// relay's publish timeout) ends the wait.
		errs := p.PublishBatch(timeout(t, 3*time.Second), []*outbox.Message{message("1", 2), message("2", 3)})
		for i, err := range errs {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("message %d: err = %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
		if err := p.Health(timeout(t, 5*time.Second)); err == nil {
			t.Error("Health = nil with the cluster closed")
		}
	})
	t.Run("never reachable", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t)
		addr := c.addr
		c.c.Close() // the port is now closed: dials are refused
		p := newPublisher(t, kafka.Config{Brokers: []string{addr}, DeliveryTimeout: time.Second})
		err := p.Publish(timeout(t, 30*time.Second), message("1", 1))
		if outbox.Classify(err) != outbox.ClassUnavailable {
			t.Fatalf("err = %v (%s), want unavailable", err, outbox.Classify(err))
		}
	})
	t.Run("relay deadline first", func(t *testing.T) {
		t.Parallel()
		// The relay's publish timeout shorter than the delivery timeout:
		// PublishBatch returns at ctx's deadline with an unavailable error.
		c := newCluster(t, kfake.SeedTopics(2, "order.created"))
		p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}})
		publishOK(t, p, []*outbox.Message{message("1", 1)})
		c.proxy.Cut()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := p.Publish(ctx, message("1", 2))
		if outbox.Classify(err) != outbox.ClassUnavailable {
			t.Fatalf("err = %v (%s), want unavailable", err, outbox.Classify(err))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Publish returned %s after its deadline", d)
		}
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, kafka.Config{Brokers: []string{c.addr}})
	if err := p.Health(timeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Health: %v", err)
	}
}

func TestNewRejectsUnsafeClientOpts(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]kgo.Opt{
		"DisableIdempotentWrite":             kgo.DisableIdempotentWrite(),
		"AllowIdempotentProduceCancellation": kgo.AllowIdempotentProduceCancellation(),
		"TransactionalID":                    kgo.TransactionalID("x"),
		"DefaultProduceTopicAlways":          kgo.DefaultProduceTopicAlways(),
	} {
		_, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:9092"}, ClientOpts: []kgo.Opt{opt}})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want a refusal naming it", name, err)
		}
		configcheck.Refused(t, name, err, "kafka.Config", "ClientOpts")
	}
	// Lower acks: franz-go itself refuses it with idempotence on, and we
	// refuse it with idempotence off.
	for _, opts := range [][]kgo.Opt{
		{kgo.RequiredAcks(kgo.LeaderAck())},
		{kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite()},
	} {
		_, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:9092"}, ClientOpts: opts})
		if err == nil || !strings.Contains(err.Error(), "acks") {
			t.Errorf("lower acks: err = %v, want a refusal", err)
		}
		configcheck.Refused(t, "lower acks", err, "kafka.Config", "ClientOpts")
	}
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming kafka.Config and the field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := []string{"h:1"}
	for _, tc := range []struct {
		cfg   kafka.Config
		field string
	}{
		{kafka.Config{}, "Brokers"},
		{kafka.Config{Brokers: []string{"nohost"}}, "Brokers"},
		{kafka.Config{Brokers: b, Topic: "{nope}"}, "Topic"},
		{kafka.Config{Brokers: b, DeliveryTimeout: time.Millisecond}, "DeliveryTimeout"},
		{kafka.Config{Brokers: b, RequestTimeout: -1}, "RequestTimeout"},
		{kafka.Config{Brokers: b, MaxMessageBytes: 10}, "MaxMessageBytes"},
		{kafka.Config{Brokers: b, TopicPartitions: -2}, "TopicPartitions"},
		{kafka.Config{Brokers: b, TopicReplicationFactor: -2}, "TopicReplicationFactor"},
	} {
		_, err := kafka.New(tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "kafka.Config", tc.field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultDeliveryTimeout":        kafka.DefaultDeliveryTimeout,
		"DefaultRequestTimeout":         kafka.DefaultRequestTimeout,
		"DefaultMaxMessageBytes":        kafka.DefaultMaxMessageBytes,
		"DefaultTopicPartitions":        kafka.DefaultTopicPartitions,
		"DefaultTopicReplicationFactor": kafka.DefaultTopicReplicationFactor,
		"outbox.DefaultTopicTemplate":   outbox.DefaultTopicTemplate,
	})
}

func TestNewFromURL(t *testing.T) {
	t.Parallel()
	p := mustURL(t, "kafka://localhost,127.0.0.1:9093?topic=outbox.{aggregate_type}&delivery_timeout=3s&request_timeout=2s&max_message_bytes=2048&client_id=relay")
	defer p.Close()
	cl := p.Client()
	if got := cl.OptValue(kgo.RecordDeliveryTimeout); got != 3*time.Second {
		t.Errorf("delivery timeout = %v", got)
	}
	if got := cl.OptValue(kgo.ProduceRequestTimeout); got != 2*time.Second {
		t.Errorf("request timeout = %v", got)
	}
	if got := cl.OptValue(kgo.ProducerBatchMaxBytes); got != int32(2048) {
		t.Errorf("max message bytes = %v", got)
	}
	if got := cl.OptValues(kgo.SeedBrokers); fmt.Sprint(got) != "[[localhost:9092 127.0.0.1:9093]]" {
		t.Errorf("seed brokers = %v", got)
	}
	if got := p.Topic(message("1", 1)); got != "outbox.order" {
		t.Errorf("topic = %q", got)
	}

	for _, s := range []string{
		"kafka://u:s3cret@h:9092?sasl=bogus",
		"kafka://u:s3cret@h:9092",
		"kafka://u:s3cret@h:9092?sasl=plain&nope=1",
		"kafka://u:s3cret@h:9092?sasl=plain&delivery_timeout=soon",
		"kafka://?topic=x",
		"nats://u:s3cret@h:9092",
		"kafka://u:s3cret@h:9092?sasl=plain&tls_ca=/nonexistent.pem",
		"kafka://h:9092?tls_cert=/c.pem",
		"kafka://h:9092?tls_key=/k.pem",
		"kafka://h:9092?tls=false&tls_ca=/ca.pem",
		"kafka://h:9092?create_topics=maybe",
		"kafka://h:9092?topic_partitions=-5",
	} {
		u, _ := url.Parse(s)
		_, err := kafka.NewFromURL(u)
		if err == nil {
			t.Errorf("NewFromURL(%s) = nil error", u.Redacted())
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error repeats the password: %v", err)
		}
	}
	sp := mustURL(t, "kafka://user:s3cret@h:9092?sasl=scram-sha-512&tls=true")
	sp.Close()
}

func mustURL(t *testing.T, s string) *kafka.Publisher {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewFromURL(u)
	if err != nil {
		t.Fatalf("NewFromURL(%s): %v", s, err)
	}
	return p
}

// Mutual TLS from the URL: tls_ca trusts a private CA, tls_cert and tls_key
// present a client certificate the cluster requires. Without the client
// certificate the handshake fails: unavailable, never a dead letter.
func TestTLSFromURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testcerts.Write(t, dir) // a CA, a server certificate for 127.0.0.1 and a client certificate
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(caPEM)
	c := newCluster(t, kfake.SeedTopics(1, "order.created"), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs,
	}))
	base := "kafka://" + c.addr + "?delivery_timeout=2s&tls_ca=" + filepath.Join(dir, "ca.pem")
	for _, tc := range []struct {
		query string
		ok    bool
	}{
		{"&tls_cert=" + filepath.Join(dir, "client.pem") + "&tls_key=" + filepath.Join(dir, "client-key.pem"), true},
		{"", false},
	} {
		u, _ := url.Parse(base + tc.query)
		p, err := kafka.NewFromURL(u)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Publish(timeout(t, 30*time.Second), message("1", 1))
		p.Close()
		switch {
		case tc.ok && err != nil:
			t.Errorf("with the client certificate: %v", err)
		case !tc.ok && (err == nil || outbox.Classify(err) != outbox.ClassUnavailable):
			t.Errorf("without the client certificate: %v (%s), want unavailable", err, outbox.Classify(err))
		}
	}
}

// Azure Event Hubs' Kafka endpoint: TLS, SASL PLAIN, the user
// "$ConnectionString" and a connection string (full of URL delimiters) as the
// password, from the environment or percent-encoded in the URL. A wrong
// connection string fails every record alike: unavailable.
func TestEventHubsConnectionString(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testcerts.Write(t, dir)
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	const conn = "Endpoint=sb://pgoutbox-test.servicebus.windows.net/;SharedAccessKeyName=outbox;SharedAccessKey=c2VjcmV0/K+ey=="
	c := newCluster(t, kfake.SeedTopics(2, "orders"), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}}),
		kfake.EnableSASL(), kfake.Superuser("PLAIN", "$ConnectionString", conn))
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c.readOpts = []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: roots}),
		kgo.SASL(plain.Auth{User: "$ConnectionString", Pass: conn}.AsMechanism())}
	env := map[string]string{"EVENTHUBS_CONNECTION_STRING": conn, "WRONG": strings.Replace(conn, "c2VjcmV0", "d3Jvbmc=", 1)}
	getenv := func(k string) string { return env[k] }
	base := "kafka://$ConnectionString@" + c.addr + "?topic=orders&tls=true&sasl=plain&delivery_timeout=2s&tls_ca=" + filepath.Join(dir, "ca.pem")
	for _, tc := range []struct {
		name, url string
		ok        bool
	}{
		{"from the environment", base + "&sasl_password_env=EVENTHUBS_CONNECTION_STRING", true},
		{"percent-encoded in the URL", strings.Replace(base, "$ConnectionString@", "$ConnectionString:"+url.QueryEscape(conn)+"@", 1), true},
		{"wrong connection string", base + "&sasl_password_env=WRONG", false},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		p, err := kafka.NewFromURLEnv(u, getenv)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = p.Publish(timeout(t, 30*time.Second), message("ord-1", 1))
		p.Close()
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && (err == nil || outbox.Classify(err) != outbox.ClassUnavailable):
			t.Errorf("%s: %v (%s), want unavailable", tc.name, err, outbox.Classify(err))
		case !tc.ok && strings.Contains(err.Error(), "SharedAccessKey"):
			t.Errorf("%s: the error repeats the connection string: %v", tc.name, err)
		}
	}
	got, err := c.read(timeout(t, 30*time.Second), "orders", 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("read back %d of 2 records: %v", len(got), err)
	}
}

func TestSASLPasswordEnvErrors(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string { return map[string]string{"SET": "s3cret"}[k] }
	for _, tc := range []struct{ url, want string }{
		{"kafka://u@h:9093?sasl=plain&sasl_password_env=UNSET", "UNSET is empty or not set"},
		{"kafka://u:s3cret@h:9093?sasl=plain&sasl_password_env=SET", "give it in one place"},
		{"kafka://h:9093?sasl_password_env=SET", "given without sasl="},
		{"kafka://u@h:9093?sasl=plain", "needs a password"},
	} {
		u, _ := url.Parse(tc.url)
		_, err := kafka.NewFromURLEnv(u, getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", u.Redacted(), err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error repeats the password: %v", u.Redacted(), err)
		}
	}
}
