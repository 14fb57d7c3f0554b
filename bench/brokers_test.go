package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsfake"
	"github.com/pgoutbox/outbox/internal/sqsfake"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/pubsub"
	"github.com/pgoutbox/outbox/rabbitmq"
	"github.com/pgoutbox/outbox/webhook"
)

// rabbitURL and redisURL are the test servers, as the broker packages'
// tests find them.
func rabbitURL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

func redisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// brokerLeftovers records what a harness created on the brokers, to check
// afterwards that it removed all of it.
type brokerLeftovers struct {
	kafka   *kfake.Cluster
	sqs     *sqsfake.Server
	pubsub  *pstest.Server
	aws     *awsfake.Server
	mu      sync.Mutex
	created map[string][]string // publisher → names
}

// startBrokers starts kfake, sqsfake and awsfake for opt's harness (which leaves
// them running, so that the test can look inside afterwards) and records
// every destination it creates.
func startBrokers(t *testing.T, opt *options) *brokerLeftovers {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := sqsfake.Start()
	t.Cleanup(f.Close)
	ps := pstest.NewServer()
	t.Cleanup(func() { _ = ps.Close() })
	af := awsfake.Start()
	t.Cleanup(af.Close)
	l := &brokerLeftovers{kafka: c, sqs: f, pubsub: ps, aws: af, created: map[string][]string{}}
	opt.kafkaCluster, opt.sqsServer, opt.pubsubServer, opt.awsServer = c, f, ps, af
	opt.onCreate = func(pub, name string) {
		l.mu.Lock()
		l.created[pub] = append(l.created[pub], name)
		l.mu.Unlock()
	}
	return l
}

// check asserts that every broker got its destination and none is left.
func (l *brokerLeftovers) check(ctx context.Context, t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pub := range allBrokers {
		if len(l.created[pub]) == 0 {
			t.Errorf("%s: the harness created no destination", pub)
		}
	}

	js, err := jetstream.New(testnats.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range l.created[pubNATS] {
		if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("NATS stream %s left behind (%v)", name, err)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(l.kafka.ListenAddrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl) // no topics given: all of them
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range meta.Topics {
		if tp.Topic != nil && slices.Contains(l.created[pubKafka], *tp.Topic) {
			t.Errorf("Kafka topic %s left behind", *tp.Topic)
		}
	}

	conn, err := amqp.Dial(rabbitURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, name := range l.created[pubRabbitMQ] {
		err := amqpDo(conn, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return err
		})
		var aerr *amqp.Error
		if !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
			t.Errorf("RabbitMQ queue %s left behind (%v)", name, err)
		}
	}

	opts, err := goredis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	for _, name := range l.created[pubRedis] {
		if n, err := rdb.Exists(ctx, name).Result(); err != nil || n != 0 {
			t.Errorf("Redis stream %s left behind (%d, %v)", name, n, err)
		}
	}

	if qs := l.sqs.Queues(); len(qs) > 0 {
		t.Errorf("SQS queues left behind: %v", qs)
	}
	if ts := l.aws.Topics(); len(ts) > 0 {
		t.Errorf("SNS topics left behind: %v", ts)
	}
	if bs := l.aws.Buses(); len(bs) != 1 {
		t.Errorf("EventBridge buses left behind: %v (want only default)", bs)
	}
	if ss := l.aws.Streams(); len(ss) > 0 {
		t.Errorf("Kinesis streams left behind: %v", ss)
	}

	psc, err := gpubsub.NewClient(ctx, benchProject, pubsub.DialConfig{Emulator: l.pubsub.Addr}.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer psc.Close()
	for _, name := range l.created[pubPubSub] {
		topic := "projects/" + benchProject + "/topics/" + name
		if _, err := psc.TopicAdminClient.GetTopic(ctx, &pb.GetTopicRequest{Topic: topic}); status.Code(err) != codes.NotFound {
			t.Errorf("Pub/Sub topic %s left behind (%v)", name, err)
		}
	}
	// MQTT: each drain's counting subscriber has a clean session, which
	// ends with its connection; the broker keeps nothing of it.

	for _, u := range l.created[pubWebhook] {
		if resp, err := http.Post(u+"/hooks/x", "application/json", strings.NewReader("{}")); err == nil {
			resp.Body.Close()
			t.Errorf("webhook receiver %s still answering", u)
		}
	}
}

// TestUnreachableBroker: a RabbitMQ or Redis that is down, or accepts
// connections and never answers, fails the run at once with an error
// naming it, before anything is measured.
func TestUnreachableBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	silent := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
				go func() { _, _ = io.Copy(io.Discard, c) }() // reads, never answers
			}
		}()
		return ln.Addr().String()
	}
	for _, tc := range []struct {
		name, broker, want string
		addr               func() string
	}{
		{"RabbitMQ refused", pubRabbitMQ, "RabbitMQ at", refused},
		{"RabbitMQ silent", pubRabbitMQ, "RabbitMQ at", silent},
		{"Redis refused", pubRedis, "redis at", refused},
		{"Redis silent", pubRedis, "redis at", silent},
		{"MQTT refused", pubMQTT, "MQTT broker at", refused},
		{"MQTT silent", pubMQTT, "MQTT broker at", silent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := tc.addr()
			opt := options{
				DatabaseURL: testdb.URL(), Runs: 1, Events: 10, BrokerEvents: 10, Timeout: time.Minute,
				Only: map[string]bool{"brokers": true}, Log: testLog{t}, Prefix: "bench_" + randHex(4),
				Brokers: []string{tc.broker}, RabbitMQURL: "amqp://guest:secret-pw@" + addr + "/", RedisURL: "redis://" + addr + "/0",
				MQTTURL: "mqtt://relay:secret-pw@" + addr,
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			err := run(ctx, opt, io.Discard, "go test ./bench")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), addr) {
				t.Fatalf("run = %v, want an error naming %q and %s", err, tc.want, addr)
			}
			if strings.Contains(err.Error(), "secret-pw") {
				t.Errorf("the error repeats the password: %v", err)
			}
			if d := time.Since(start); d > 4*brokerDialTimeout {
				t.Errorf("failed after %s, want within a few dial timeouts (%s)", d.Round(time.Second), brokerDialTimeout)
			}
			t.Log(err)
		})
	}
}

// TestReceiver: the webhook receiver counts distinct event ids and refuses,
// and reports, a request whose signature does not verify, so a drain to it
// can fail its check.
func TestReceiver(t *testing.T) {
	t.Parallel()
	secret := "whsec_dGVzdC1zZWNyZXQ="
	r, err := startReceiver(secret)
	if err != nil {
		t.Fatal(err)
	}
	post := func(id, secret string) int {
		t.Helper()
		body := []byte(`{"order_id":"1"}`)
		now := time.Now()
		sig, err := webhook.Signature([]string{secret}, id, now, body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, r.url+"/hooks/order.created", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(webhook.HeaderID, id)
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(webhook.HeaderSignature, sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, id := range []string{"a", "b", "a"} {
		if code := post(id, secret); code != http.StatusNoContent {
			t.Fatalf("signed request %s: status %d, want 204", id, code)
		}
	}
	ctx := context.Background()
	if n, err := r.count(ctx); n != 2 || err != nil {
		t.Fatalf("count = %d, %v; want 2 distinct ids", n, err)
	}
	if code := post("c", "whsec_b3RoZXItc2VjcmV0"); code != http.StatusUnauthorized {
		t.Fatalf("request signed with another secret: status %d, want 401", code)
	}
	if _, err := r.count(ctx); err == nil || !strings.Contains(err.Error(), "1 requests refused") {
		t.Fatalf("count after a bad signature: %v, want an error", err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
}

// TestParseFlags: figure 5's flags and defaults.
func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		events  int
		brokers []string
	}{
		{nil, 100_000, allBrokers},
		{[]string{"--quick"}, 20_000, allBrokers},
		{[]string{"--events", "20000"}, 20_000, allBrokers},
		{[]string{"--broker-events", "5000", "--brokers", "redis, kafka,redis"}, 5000, []string{pubRedis, pubKafka}},
		{[]string{"--brokers", ""}, 100_000, nil},
	} {
		opt, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if opt.BrokerEvents != tc.events || !slices.Equal(opt.Brokers, tc.brokers) {
			t.Errorf("%q: broker events %d, brokers %v; want %d, %v", tc.args, opt.BrokerEvents, opt.Brokers, tc.events, tc.brokers)
		}
	}
	for _, args := range [][]string{{"--brokers", "kafka,memcached"}, {"--only", "broker"}, {"--broker-events", "-1"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if _, err := parseFlags([]string{"--brokers", "kafka,memcached"}, io.Discard); err == nil || !strings.Contains(err.Error(), "memcached") {
		t.Errorf("unknown broker: %v, want an error naming it", err)
	}
}

// TestBrokersReuseDrain: when figure 1 drained the same backlog the same way
// in the run, figure 5 reuses its in-memory and NATS drains instead of
// measuring them twice.
func TestBrokersReuseDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	var streams []string
	opt := options{
		DatabaseURL: testdb.URL(), NatsURL: testnats.URL(), Runs: 1, Events: 500, BrokerEvents: 500, BaselineCap: 100,
		Workers: 2, Timeout: time.Minute, Only: map[string]bool{"drain": true, "brokers": true}, Filter: "pgoutbox → ",
		Log: testLog{t}, Prefix: "bench_" + randHex(4), Brokers: []string{pubNATS},
		onCreate: func(pub, name string) { streams = append(streams, name) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, opt, &out, "go test ./bench"); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	t.Log("\n" + md)
	rate := func(labelPrefix string) string {
		for _, line := range strings.Split(md, "\n") {
			if strings.HasPrefix(line, "| "+labelPrefix) {
				return strings.Split(line, " | ")[2]
			}
		}
		t.Fatalf("no row %q", labelPrefix)
		return ""
	}
	for _, pair := range [][2]string{
		{"pgoutbox → in-memory (defaults: ", brokerLabel(pubMemory)},
		{"pgoutbox → NATS JetStream (defaults)", brokerLabel(pubNATS)},
	} {
		if a, b := rate(pair[0]), rate(pair[1]); a != b {
			t.Errorf("%s: %s in figure 5, %s in figure 1: measured twice", pair[1], b, a)
		}
	}
	if !strings.Contains(md, "not measured twice") {
		t.Error("figure 5 does not say its rows come from figure 1")
	}
	if len(streams) != 1 {
		t.Errorf("%d NATS streams created (%v), want 1: one drain to NATS", len(streams), streams)
	}
}

// TestDestinationCounts: each broker check reads the broker itself: a fresh
// destination counts 0 (so a drain whose messages never arrived fails its
// check), and the messages the publisher confirmed are counted, a duplicate
// included (the broker holds it twice; the webhook receiver counts ids).
func TestDestinationCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	opt := options{
		DatabaseURL: testdb.URL(), NatsURL: testnats.URL(), Only: map[string]bool{"brokers": true}, Log: testLog{t},
		Prefix: "bench_" + randHex(4), Brokers: allBrokers, RabbitMQURL: rabbitURL(), RedisURL: redisURL(), Timeout: time.Minute,
	}
	bl := startBrokers(t, &opt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := newHarness(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, pub := range allBrokers {
		spec := h.spec(designOurs, "", pub)
		d, err := h.openDestination(ctx, &spec)
		if err != nil {
			t.Fatalf("%s: %v", pub, err)
		}
		if n, err := d.count(ctx); n != 0 || err != nil {
			t.Errorf("%s: fresh %s counts %d (%v), want 0", pub, d.what, n, err)
		}
		rec := newRecorder(3, false)
		rp, closePub, err := publisherFor(spec, rec)
		if err != nil {
			t.Fatalf("%s: %v", pub, err)
		}
		msgs := []*outbox.Message{publishertest.NewMessage("0", `{"i":0}`), publishertest.NewMessage("1", `{"i":1}`)}
		msgs = append(msgs, msgs[1]) // published twice
		for i, err := range rp.PublishBatch(ctx, msgs) {
			if err != nil {
				t.Fatalf("%s: message %d: %v", pub, i, err)
			}
		}
		closePub()
		want := int64(3)
		if pub == pubWebhook || pub == pubNATS { // distinct ids; JetStream dedups on the event id
			want = 2
		}
		if n, err := waitStored(ctx, d, want); n != want || err != nil {
			t.Errorf("%s: %s counts %d (%v), want %d", pub, d.what, n, err, want)
		}
		if del := rec.delivery(2); !del.OK() || del.Dups() != 1 {
			t.Errorf("%s: recorder %+v, want 2 distinct, 1 duplicate", pub, del)
		}
		h.releaseDestination(ctx, d)
	}
	h.close()
	bl.check(ctx, t)
}
