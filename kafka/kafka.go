package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults for Config's zero values.
const (
	// DefaultDeliveryTimeout stays below the relay's default PublishTimeout
	// (15s), so a dead cluster fails records with an error the publisher can
	// classify before the relay gives up on the batch.
	DefaultDeliveryTimeout = 10 * time.Second
	// DefaultRequestTimeout is how long a broker may wait for the in-sync
	// replicas (acks=all) before answering a produce request.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultMaxMessageBytes is Kafka's default max.message.bytes for topics.
	DefaultMaxMessageBytes = 1000012
	// DefaultTopicPartitions and DefaultTopicReplicationFactor leave the
	// shape of a created topic to the brokers (num.partitions,
	// default.replication.factor).
	DefaultTopicPartitions        = -1
	DefaultTopicReplicationFactor = -1
)

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Brokers are the seed brokers, "host:port". Required.
	Brokers []string
	// Topic is a topic template (outbox.ParseTopicTemplate) giving each
	// record's topic. Defaults to outbox.DefaultTopicTemplate
	// ("{event_type}").
	Topic string
	// DeliveryTimeout bounds how long a record may wait to be produced
	// (kgo.RecordDeliveryTimeout, Kafka's delivery.timeout.ms). Keep it
	// below the relay's PublishTimeout so that a dead cluster surfaces as a
	// classified error. Defaults to DefaultDeliveryTimeout (10s).
	DeliveryTimeout time.Duration
	// RequestTimeout is the produce request's timeout: how long the leader
	// may wait for the in-sync replicas (kgo.ProduceRequestTimeout, Kafka's
	// request.timeout.ms). Defaults to DefaultRequestTimeout (5s).
	RequestTimeout time.Duration
	// MaxMessageBytes caps one record batch (kgo.ProducerBatchMaxBytes). Set
	// it to the topics' max.message.bytes when that is below Kafka's default
	// 1000012: a record larger than this fails at once with a permanent
	// error, and batches never grow past it. A larger cap makes the broker
	// reject a whole batch, failing every record in it, when the records
	// together exceed the topic's limit. Defaults to DefaultMaxMessageBytes
	// (1,000,012).
	MaxMessageBytes int32
	// CreateTopics lets the publisher create a topic a record was refused
	// for as unknown, then produce the refused records again: opt-in topology
	// creation. Off (the default): the publisher creates nothing, and an
	// unknown topic is an outage naming the command that fixes it. The
	// client never asks brokers to auto-create topics either way.
	CreateTopics bool
	// TopicPartitions and TopicReplicationFactor shape the topics
	// CreateTopics creates; -1 leaves them to the brokers' num.partitions
	// and default.replication.factor. Defaults to DefaultTopicPartitions
	// (-1) and DefaultTopicReplicationFactor (-1).
	TopicPartitions        int32
	TopicReplicationFactor int16
	// ClientOpts are extra franz-go options (TLS, SASL, client id, ...)
	// applied after the publisher's own. They must not lower acks below
	// all, disable idempotent writes, allow cancelling in-flight idempotent
	// records, set a transactional id, or force a default produce topic:
	// New rejects a client configured so.
	ClientOpts []kgo.Opt
}

// Publisher is an outbox.BatchPublisher and outbox.HealthChecker for Kafka.
// It is safe for concurrent use.
type Publisher struct {
	cl    *kgo.Client
	topic *outbox.TopicTemplate

	create      bool  // Config.CreateTopics
	partitions  int32 // for created topics
	replication int16
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// New validates cfg and returns a Publisher with its own franz-go client.
// It does not contact the cluster; Close releases the client.
func New(cfg Config) (*Publisher, error) {
	if len(cfg.Brokers) == 0 {
		return nil, bad("Brokers", "at least one seed broker is required")
	}
	for _, b := range cfg.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, bad("Brokers", "%q: want host:port: %w", b, err)
		}
	}
	topic, err := outbox.ParseTopicTemplate(cfg.Topic)
	if err != nil {
		return nil, bad("Topic", "%w", err)
	}
	cfg.DeliveryTimeout = cmp.Or(cfg.DeliveryTimeout, DefaultDeliveryTimeout)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout)
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	cfg.TopicPartitions = cmp.Or(cfg.TopicPartitions, DefaultTopicPartitions)
	cfg.TopicReplicationFactor = cmp.Or(cfg.TopicReplicationFactor, DefaultTopicReplicationFactor)
	switch {
	case cfg.TopicPartitions < -1:
		return nil, bad("TopicPartitions", "%d: must be positive, or -1 for the brokers' default", cfg.TopicPartitions)
	case cfg.TopicReplicationFactor < -1:
		return nil, bad("TopicReplicationFactor", "%d: must be positive, or -1 for the brokers' default", cfg.TopicReplicationFactor)
	case cfg.DeliveryTimeout < 100*time.Millisecond:
		return nil, bad("DeliveryTimeout", "%s: must be at least 100ms", cfg.DeliveryTimeout)
	case cfg.RequestTimeout < 100*time.Millisecond:
		return nil, bad("RequestTimeout", "%s: must be at least 100ms", cfg.RequestTimeout)
	case cfg.MaxMessageBytes < 1024:
		return nil, bad("MaxMessageBytes", "%d: must be at least 1024", cfg.MaxMessageBytes)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		// acks=all and idempotence are franz-go's defaults; stated here so
		// that the intent is visible and checked below.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
		kgo.ProduceRequestTimeout(cfg.RequestTimeout),
		kgo.ProducerBatchMaxBytes(cfg.MaxMessageBytes),
	}
	opts = append(opts, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, bad("ClientOpts", "%w", err)
	}
	if err := checkDurability(cl); err != nil {
		cl.Close()
		return nil, err
	}
	return &Publisher{cl: cl, topic: topic, create: cfg.CreateTopics, partitions: cfg.TopicPartitions,
		replication: cfg.TopicReplicationFactor}, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "kafka.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// checkDurability refuses a client whose options would let Publish return
// before the record is durably stored, or break the producer's ordering and
// deduplication.
func checkDurability(cl *kgo.Client) error {
	refuse := func(what string) error {
		return bad("ClientOpts", "%s is not allowed: the outbox needs acks=all and the idempotent producer", what)
	}
	if acks, _ := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return refuse("RequiredAcks other than AllISRAcks")
	}
	if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return refuse("DisableIdempotentWrite")
	}
	if v, _ := cl.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); v {
		return refuse("AllowIdempotentProduceCancellation")
	}
	if v := cl.OptValues(kgo.TransactionalID); len(v) == 2 && v[1] == true {
		return refuse("TransactionalID")
	}
	if v, _ := cl.OptValue(kgo.DefaultProduceTopicAlways).(bool); v {
		return refuse("DefaultProduceTopicAlways")
	}
	return nil
}

// Client returns the underlying franz-go client, for metrics hooks and
// administration. Producing through it bypasses the publisher's contract.
func (p *Publisher) Client() *kgo.Client { return p.cl }

// Topic returns the topic msg is produced to.
func (p *Publisher) Topic(msg *outbox.Message) string { return p.topic.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "kafka" }

// Destination implements outbox.Describer: the topic.
func (p *Publisher) Destination(msg *outbox.Message) string { return p.topic.Render(msg) }

// Close fails records still buffered (their Publish calls have already
// returned) and closes the client's connections.
func (p *Publisher) Close() { p.cl.Close() }

// Health pings a broker (a metadata request).
func (p *Publisher) Health(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: ping: %w", err)
	}
	return nil
}

// Record returns the Kafka record msg becomes: topic from the template,
// key = aggregate id, and in msg.Envelope: value = payload, headers =
// msg.StandardHeaders() in name order (the outbox's format); or the Kafka
// protocol binding's binary content mode (value = payload, ce_ headers,
// content-type = application/json) or structured mode (value = the JSON
// event format, content-type = application/cloudevents+json). An error
// is about the message (no CloudEvent can carry it): permanent.
func (p *Publisher) Record(msg *outbox.Message) (*kgo.Record, error) {
	r := &kgo.Record{Topic: p.topic.Render(msg), Value: msg.Payload}
	if msg.AggregateID != "" {
		r.Key = []byte(msg.AggregateID)
	}
	switch msg.Envelope {
	case outbox.EnvelopeCloudEvents:
		ce, err := msg.CloudEvent()
		if err != nil {
			return nil, err
		}
		attrs := ce.Attributes()
		r.Headers = make([]kgo.RecordHeader, 0, len(attrs)+1)
		for _, a := range attrs {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderCloudEventsPrefix + a.Name, Value: []byte(a.Value)})
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(ce.DataContentType)})
		return r, nil
	case outbox.EnvelopeCloudEventsStructured:
		body, err := msg.StructuredCloudEvent()
		if err != nil {
			return nil, err
		}
		r.Value = body
		r.Headers = []kgo.RecordHeader{{Key: HeaderContentType, Value: []byte(outboxtype.CloudEventsJSON)}}
		return r, nil
	}
	h := msg.StandardHeaders()
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	r.Headers = make([]kgo.RecordHeader, len(names))
	for i, k := range names {
		r.Headers[i] = kgo.RecordHeader{Key: k, Value: []byte(h[k])}
	}
	return r, nil
}

// The Kafka protocol binding's header names: each CloudEvents attribute
// travels as ce_<name> (binary content mode), datacontenttype or the event
// format as content-type.
const (
	HeaderCloudEventsPrefix = "ce_"
	HeaderContentType       = "content-type"
)

// produceAgain produces msgs[i] alone and waits for its acknowledgement.
func (p *Publisher) produceAgain(ctx context.Context, msg *outbox.Message) error {
	r, err := p.Record(msg)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("kafka: %w", err))
	}
	return p.cl.ProduceSync(ctx, r).FirstErr()
}

// Publish produces msg and waits for the acks=all acknowledgement.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

type outcome struct {
	i   int
	err error
}

// PublishBatch produces every message asynchronously, then waits for every
// acknowledgement (or ctx): one pipelined round for the whole batch, one
// result per message. Records with the same aggregate id share a partition
// and keep their order within the batch.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	// Buffered for every record: a promise that fires after we stopped
	// waiting (ctx done) must not block franz-go's promise goroutine.
	done := make(chan outcome, len(msgs))
	pending := 0
	topics := make([]string, len(msgs))
	for i, msg := range msgs {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("not produced: %w", err)
			continue
		}
		r, err := p.Record(msg)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("kafka: %w", err))
			continue
		}
		topics[i] = r.Topic
		if err := validTopic(r.Topic); err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("kafka: topic %q (template %q): %w", r.Topic, p.topic, err))
			continue
		}
		pending++
		p.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- outcome{i, err} })
	}
	waiting := make([]bool, len(msgs))
	for i := range errs {
		waiting[i] = errs[i] == nil
	}
wait:
	for pending > 0 {
		select {
		case o := <-done:
			pending--
			waiting[o.i] = false
			if o.err != nil {
				errs[o.i] = o.err
			}
		case <-ctx.Done():
			break wait
		}
	}
	// Acknowledgements that raced with ctx still count.
	for drained := false; pending > 0 && !drained; {
		select {
		case o := <-done:
			pending--
			waiting[o.i] = false
			errs[o.i] = o.err
		default:
			drained = true
		}
	}
	for i, w := range waiting {
		if w {
			errs[i] = fmt.Errorf("waiting for acknowledgement: %w", ctx.Err())
		}
	}
	p.retryTooLarge(ctx, msgs, errs)
	p.createMissing(ctx, msgs, errs, topics)
	return classifyRecords(errs, topics)
}

// retryTooLarge produces again, one at a time, the records a broker refused
// as too large when several were refused together: Kafka judges a record
// batch as a whole, so one record over the topic's max.message.bytes fails
// every healthy record batched with it. Alone, each record gets its own
// verdict; only the oversized one stays a (permanent) failure. Records go
// one after another in their original order, so per-key order holds.
func (p *Publisher) retryTooLarge(ctx context.Context, msgs []*outbox.Message, errs []error) {
	var refused []int
	for i, err := range errs {
		if err != nil && (errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) {
			refused = append(refused, i)
		}
	}
	if len(refused) < 2 {
		return // a record refused on its own is the oversized one
	}
	for _, i := range refused {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("not produced again after the batch was refused as too large: %w", err)
			continue
		}
		errs[i] = p.produceAgain(ctx, msgs[i])
	}
}

// validTopic applies Kafka's topic name rules, so a template rendering an
// impossible name (an event type with a space) fails at once and clearly.
func validTopic(t string) error {
	switch {
	case t == "":
		return errors.New("empty topic name")
	case t == "." || t == "..":
		return errors.New(`topic name cannot be "." or ".."`)
	case len(t) > 249:
		return fmt.Errorf("topic name longer than 249 characters (%d)", len(t))
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name has %q: Kafka allows only [a-zA-Z0-9._-]", c)
		}
	}
	return nil
}

// createMissing, with Config.CreateTopics, creates the topics records were
// refused for as unknown and produces those records again, one at a time in
// their original order, so per-key order holds.
func (p *Publisher) createMissing(ctx context.Context, msgs []*outbox.Message, errs []error, topics []string) {
	if !p.create {
		return
	}
	var missing []string
	for i, err := range errs {
		if err != nil && (errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)) &&
			!slices.Contains(missing, topics[i]) {
			missing = append(missing, topics[i])
		}
	}
	if len(missing) == 0 {
		return
	}
	created := map[string]error{}
	for _, t := range missing {
		created[t] = p.createTopic(ctx, t)
	}
	for i, err := range errs {
		if err == nil || !(errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)) {
			continue
		}
		if cerr := created[topics[i]]; cerr != nil {
			errs[i] = fmt.Errorf("%w (creating it: %w)", err, cerr)
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("not produced again after creating its topic: %w", err)
			continue
		}
		errs[i] = p.produceAgain(ctx, msgs[i])
	}
}

// createTopic creates topic; a topic that exists by now is fine.
func (p *Publisher) createTopic(ctx context.Context, topic string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = p.partitions
	rt.ReplicationFactor = p.replication
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return err
		}
	}
	// The client learns of the topic at its next metadata refresh.
	p.cl.ForceMetadataRefresh()
	return nil
}
