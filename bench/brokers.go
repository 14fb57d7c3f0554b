package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/sqsfake"
	"github.com/pgoutbox/outbox/webhook"
)

// The brokers of the per-broker drain (figure 5), besides pubMemory and
// pubNATS.
const (
	pubKafka    = "kafka"
	pubRabbitMQ = "rabbitmq"
	pubRedis    = "redis"
	pubSQS      = "sqs"
	pubWebhook  = "webhook"
)

// allBrokers are --brokers' choices, in table order. The in-memory drain is
// not among them: it always runs, as the reference of every ratio.
var allBrokers = []string{pubNATS, pubKafka, pubRabbitMQ, pubRedis, pubSQS, pubSNS, pubEventBridge, pubKinesis, pubWebhook, pubPubSub, pubMQTT}

// brokerLabel is figure 5's row label: the broker and what confirms an event.
func brokerLabel(pub string) string {
	switch pub {
	case pubMemory:
		return "in-memory (confirms at once; the reference)"
	case pubNATS:
		return "NATS JetStream (PubAck, file storage)"
	case pubKafka:
		return "Kafka, kfake in the harness process (acks=all, idempotent producer)"
	case pubRabbitMQ:
		return "RabbitMQ (publisher confirms, durable queue, persistent messages)"
	case pubRedis:
		return "Redis Streams (XADD reply, no WAIT)"
	case pubSQS:
		return "SQS, sqsfake in the harness process (SendMessageBatch reply)"
	case pubSNS:
		return "SNS, awsfake in the harness process (PublishBatch reply)"
	case pubEventBridge:
		return "EventBridge, awsfake in the harness process (PutEvents reply)"
	case pubKinesis:
		return "Kinesis, awsfake in the harness process (PutRecords reply, 4 shards)"
	case pubWebhook:
		return "webhook, receiver in the harness process (signed POST, 2xx)"
	case pubPubSub:
		return "Pub/Sub, pstest in the harness process (publish result, ordering key = aggregate id)"
	case pubMQTT:
		return "MQTT 3.1.1 (QoS 1 PUBACK, Mosquitto)"
	}
	return pub
}

// brokerDialTimeout bounds connecting to RabbitMQ and Redis at start-up, so
// a server that is down or silent fails the run with its name at once.
const brokerDialTimeout = 5 * time.Second

// brokers are the servers figure 5 publishes to, or reaches, from the
// harness: the in-process ones it started, and admin clients that create,
// count and remove each drain's queue, stream or topic.
type brokers struct {
	kfake    *kfake.Cluster // nil unless started here
	kafka    string         // seed broker, host:port
	kcl      *kgo.Client
	sqsFake  *sqsfake.Server // nil unless started here
	sqsURL   string          // endpoint
	sqs      *awssqs.Client
	amqp     *amqp.Connection
	redis    *goredis.Client
	redisURL string

	pubsubFake *pstest.Server // nil unless started here
	pubsubAddr string
	pubsub     *gpubsub.Client
	aws        awsBrokers // SNS, EventBridge, Kinesis
}

// openBrokers connects to (or starts) every broker --brokers names, NATS
// aside (newHarness connects to it).
func (h *harness) openBrokers(ctx context.Context) error {
	b := &h.brokers
	for _, pub := range h.opt.Brokers {
		if isAWSFake(pub) {
			h.openAWS()
			continue
		}
		switch pub {
		case pubKafka:
			c := h.opt.kafkaCluster
			if c == nil {
				var err error
				c, err = kfake.NewCluster(kfake.NumBrokers(1),
					kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
				if err != nil {
					return fmt.Errorf("kfake: %w", err)
				}
				b.kfake = c
			}
			b.kafka = c.ListenAddrs()[0]
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.kafka))
			if err != nil {
				return fmt.Errorf("kafka admin client: %w", err)
			}
			b.kcl = cl
		case pubSQS:
			f := h.opt.sqsServer
			if f == nil {
				f = sqsfake.Start()
				b.sqsFake = f
			}
			b.sqsURL = f.URL()
			b.sqs = newSQSClient(b.sqsURL)
		case pubRabbitMQ:
			u, err := url.Parse(h.opt.RabbitMQURL)
			if err != nil {
				return fmt.Errorf("--rabbitmq-url: %w", err)
			}
			conn, err := amqp.DialConfig(h.opt.RabbitMQURL, amqp.Config{
				Dial:       amqp.DefaultDial(brokerDialTimeout),
				Properties: amqp.Table{"connection_name": h.prefix + "-admin"},
			})
			if err != nil {
				return fmt.Errorf("RabbitMQ at %s (--rabbitmq-url) is not reachable: %w; start it, or leave rabbitmq out of --brokers", u.Redacted(), err)
			}
			b.amqp = conn
		case pubRedis:
			opts, err := goredis.ParseURL(h.opt.RedisURL)
			if err != nil {
				return fmt.Errorf("--redis-url: %w", err)
			}
			opts.DialTimeout = brokerDialTimeout
			opts.MaxRetries = -1
			b.redis, b.redisURL = goredis.NewClient(opts), h.opt.RedisURL
			pctx, cancel := context.WithTimeout(ctx, 2*brokerDialTimeout)
			err = b.redis.Ping(pctx).Err()
			cancel()
			if err != nil {
				return fmt.Errorf("redis at %s (--redis-url) is not reachable: %w; start it, or leave redis out of --brokers", opts.Addr, err)
			}
		case pubPubSub:
			if err := h.openPubSub(ctx); err != nil {
				return err
			}
		case pubMQTT:
			if err := h.openMQTT(); err != nil {
				return err
			}
		}
	}
	return nil
}

// closeBrokers closes the admin clients and stops the servers started here
// (their topics and queues go with them, --keep or not).
func (h *harness) closeBrokers() {
	b := &h.brokers
	if b.kcl != nil {
		b.kcl.Close()
	}
	if b.kfake != nil {
		b.kfake.Close()
	}
	if b.sqsFake != nil {
		b.sqsFake.Close()
	}
	h.closeAWS()
	if b.amqp != nil {
		_ = b.amqp.Close()
	}
	if b.redis != nil {
		_ = b.redis.Close()
	}
	h.closePubSub()
}

// newSQSClient is an SDK client for the fake at endpoint: static
// credentials (the fake does not check signatures, only that there is one).
func newSQSClient(endpoint string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region: sqsfake.Region, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("pgoutbox-bench", "pgoutbox-bench", ""),
	})
}

// destination is one drain's place on a broker: created before its relay
// starts, counted in the broker once the relay confirmed every event, and
// removed after.
type destination struct {
	what   string                                   // e.g. "RabbitMQ queue bench_x_3", for errors
	count  func(ctx context.Context) (int64, error) // messages the broker holds
	remove func(ctx context.Context) error
	done   bool
}

// openDestination creates a drain's destination on pub's broker and points
// spec at it; nil for the in-memory publisher. Every destination still open
// is removed by close, unless --keep.
func (h *harness) openDestination(ctx context.Context, spec *relaySpec) (*destination, error) {
	b := &h.brokers
	h.seq++
	name := fmt.Sprintf("%s_%d", h.prefix, h.seq)
	var d *destination
	switch spec.Publisher {
	case pubMemory:
		return nil, nil
	case pubNATS:
		stream, err := h.newStream(ctx)
		if err != nil {
			return nil, err
		}
		spec.Subject = stream
		d = &destination{what: "stream " + stream,
			count: func(ctx context.Context) (int64, error) {
				n, err := h.streamMsgs(ctx, stream)
				return int64(n), err
			},
			remove: func(ctx context.Context) error { h.releaseStream(ctx, stream); return nil }}
		// newStream tracks the stream (and close deletes it) already.
		return d, nil
	case pubKafka:
		if err := kafkaCreateTopic(ctx, b.kcl, name); err != nil {
			return nil, fmt.Errorf("kafka: create topic %s: %w", name, err)
		}
		spec.BrokerURL, spec.Target = b.kafka, name
		d = &destination{what: "Kafka topic " + name,
			count:  func(ctx context.Context) (int64, error) { return kafkaEndOffsets(ctx, b.kcl, name) },
			remove: func(ctx context.Context) error { return kafkaDeleteTopic(ctx, b.kcl, name) }}
	case pubRabbitMQ:
		if err := amqpDo(b.amqp, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(name, true, false, false, false, nil)
			return err
		}); err != nil {
			return nil, fmt.Errorf("RabbitMQ: declare queue %s: %w", name, err)
		}
		// The default exchange routes each message to the queue named by
		// its routing key.
		spec.BrokerURL, spec.Target = h.opt.RabbitMQURL, name
		d = &destination{what: "RabbitMQ queue " + name,
			count: func(context.Context) (int64, error) {
				var n int64
				err := amqpDo(b.amqp, func(ch *amqp.Channel) error {
					q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
					n = int64(q.Messages)
					return err
				})
				return n, err
			},
			remove: func(context.Context) error {
				return amqpDo(b.amqp, func(ch *amqp.Channel) error {
					_, err := ch.QueueDelete(name, false, false, false)
					return err
				})
			}}
	case pubRedis:
		name = h.prefix + ":" + strconv.Itoa(h.seq)
		spec.BrokerURL, spec.Target = b.redisURL, name
		// XADD creates the stream.
		d = &destination{what: "Redis stream " + name,
			count:  func(ctx context.Context) (int64, error) { return b.redis.XLen(ctx, name).Result() },
			remove: func(ctx context.Context) error { return b.redis.Del(ctx, name).Err() }}
	case pubSQS:
		out, err := b.sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			return nil, fmt.Errorf("SQS: create queue %s: %w", name, err)
		}
		qurl := aws.ToString(out.QueueUrl)
		spec.BrokerURL, spec.Target = b.sqsURL, qurl
		d = &destination{what: "SQS queue " + name,
			count: func(ctx context.Context) (int64, error) { return sqsCount(ctx, b.sqs, qurl) },
			remove: func(ctx context.Context) error {
				_, err := b.sqs.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(qurl)})
				return err
			}}
	case pubSNS, pubEventBridge, pubKinesis:
		var err error
		if d, err = h.openAWSDestination(ctx, spec, name); err != nil {
			return nil, err
		}
	case pubWebhook:
		recv, err := startReceiver("whsec_" + base64.StdEncoding.EncodeToString([]byte(randHex(24))))
		if err != nil {
			return nil, err
		}
		name = recv.url
		spec.Target, spec.Secret = recv.url+"/hooks/{event_type}", recv.secret
		d = &destination{what: "webhook receiver " + recv.url, count: recv.count,
			remove: func(context.Context) error { return recv.close() }}
	case pubPubSub, pubMQTT:
		open := h.pubsubDestination
		if spec.Publisher == pubMQTT {
			open = h.mqttDestination
		}
		var err error
		if d, err = open(ctx, spec, name); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("publisher %q", spec.Publisher)
	}
	if h.opt.onCreate != nil {
		h.opt.onCreate(spec.Publisher, name)
	}
	h.dests = append(h.dests, d)
	return d, nil
}

// release removes a destination once its drain is checked, unless --keep.
func (h *harness) releaseDestination(ctx context.Context, d *destination) {
	if h.opt.Keep || d.done {
		return
	}
	d.done = true
	if err := d.remove(ctx); err != nil {
		h.logf("remove %s: %v", d.what, err)
	}
}

// waitStored waits until d holds at least n messages, or until d's count
// has not grown for a while: the broker has them all when the relay saw
// every confirmation, but a count (RabbitMQ's queue depth) may trail it.
func waitStored(ctx context.Context, d *destination, n int64) (int64, error) {
	var (
		last  int64 = -1
		since       = time.Now()
	)
	for {
		got, err := d.count(ctx)
		if err != nil || got >= n {
			return got, err
		}
		if got != last {
			last, since = got, time.Now()
		} else if time.Since(since) > 2*time.Second {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// amqpDo runs fn on a channel of its own: a failed operation (a passive
// declare of a missing queue) closes its channel, not the connection.
func amqpDo(conn *amqp.Connection, fn func(*amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	err = fn(ch)
	if cerr := ch.Close(); err == nil && cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
		err = cerr
	}
	return err
}

// kafkaPartitions is the partition count of every drain's topic (Kafka's
// default num.partitions).
const kafkaPartitions = 1

func kafkaCreateTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, kafkaPartitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("%d topics in the response", len(resp.Topics))
	}
	return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}

func kafkaDeleteTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{topic} // up to v5
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic) // v6+
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return err
		}
	}
	return nil
}

// kafkaEndOffsets is the sum of the topic's partitions' end offsets: the
// records it holds (no transactions, so no control records among them).
func kafkaEndOffsets(ctx context.Context, cl *kgo.Client, topic string) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(kafkaPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // -1: the end offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, fmt.Errorf("partition %d: %w", p.Partition, err)
			}
			n += p.Offset
		}
	}
	return n, nil
}

// sqsCount is the queue's messages, visible and in flight (nothing
// receives from it here, so all are visible).
func sqsCount(ctx context.Context, c *awssqs.Client, qurl string) (int64, error) {
	out, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(qurl),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, a := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		x, err := strconv.ParseInt(out.Attributes[string(a)], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("attribute %s: %w", a, err)
		}
		n += x
	}
	return n, nil
}

// receiver is a webhook endpoint on a loopback port: it verifies each
// request's signature with webhook.Verify, answers 204 to a valid one (401
// otherwise) and counts distinct webhook-id values, the event ids.
type receiver struct {
	url    string
	secret string
	srv    *http.Server
	served chan struct{}

	mu   sync.Mutex
	ids  map[string]struct{}
	bad  int64
	last error
}

func startReceiver(secret string) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := &receiver{url: "http://" + ln.Addr().String(), secret: secret, ids: map[string]struct{}{}, served: make(chan struct{})}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.served)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err == nil && (req.Method != http.MethodPost || !strings.HasPrefix(req.URL.Path, "/hooks/")) {
		err = fmt.Errorf("%s %s", req.Method, req.URL.Path)
	}
	if err == nil {
		err = webhook.Verify([]string{r.secret}, req.Header, body, 0)
	}
	r.mu.Lock()
	if err != nil {
		r.bad++
		r.last = err
	} else {
		r.ids[req.Header.Get(webhook.HeaderID)] = struct{}{}
	}
	r.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// count is the distinct event ids received; a request that failed
// verification fails the check.
func (r *receiver) count(context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bad > 0 {
		return int64(len(r.ids)), fmt.Errorf("%d requests refused (the last: %v)", r.bad, r.last)
	}
	return int64(len(r.ids)), nil
}

func (r *receiver) close() error {
	err := r.srv.Close()
	<-r.served
	return err
}

// sameRun is a drain figure 1 measured in this run that figure 5 would
// measure again: the pgoutbox relay with its defaults, to the in-memory
// publisher or NATS, over figure 5's backlog.
type sameRun struct {
	rate float64
	res  relayResult
	err  error
}

// brokersRun measures figure 5 once: a drain of the same backlog per
// broker, after the in-memory drain every ratio refers to.
func (h *harness) brokersRun(ctx context.Context, r *results) error {
	n := h.opt.BrokerEvents
	var memRate float64
	for _, pub := range append([]string{pubMemory}, h.opt.Brokers...) {
		label := brokerLabel(pub)
		f := r.broker(label, n)
		var (
			res  relayResult
			rate float64
			err  error
		)
		if o, ok := h.sameRun[pub]; ok {
			h.logf("brokers: %s: figure 1 drained %d events the same way in this run: its figures are reused", label, n)
			res, rate, err = o.res, o.rate, o.err
			if note := "the run's drain of figure 1 (same relay, publisher and backlog), not measured twice"; len(f.Notes) == 0 || f.Notes[len(f.Notes)-1] != note {
				f.Notes = append(f.Notes, note)
			}
		} else {
			s, serr := h.setupOurs(ctx, "broker_"+pub)
			if serr == nil {
				h.logf("brokers: filling %d events", n)
				serr = h.fillOurs(ctx, s, 0, n)
			}
			if serr != nil {
				return serr
			}
			spec := h.spec(designOurs, s, pub)
			h.logf("brokers: %s, %d events", label, n)
			res, rate, err = h.drainOnce(ctx, spec, s, n, nil)
			h.release(ctx, s)
		}
		if pub == pubMemory {
			memRate = rate
		}
		ratio := 0.0
		if memRate > 0 {
			ratio = rate / memRate
		}
		note := ""
		if err != nil {
			note = err.Error()
			h.logf("brokers: %s: FAILED: %v", label, err)
		}
		f.add(rate, ratio, res, err == nil && res.Delivery.OK(), note)
		h.logf("brokers: %s: %.0f ev/s (%.2f of in-memory), peak RSS %.1f MB, delivered %d/%d, dups %d",
			label, rate, ratio, float64(res.MaxRSSKB)/1024, res.Delivery.Distinct, n, res.Delivery.Dups())
	}
	return nil
}
