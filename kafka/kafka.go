package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pgoutbox/outbox"
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
)

// Config configures a Publisher. Zero values mean the documented defaults.
type Config struct {
	// Brokers are the seed brokers, "host:port". Required.
	Brokers []string
	// Topic is a topic template (outbox.ParseTopicTemplate) giving each
	// record's topic. Default "{event_type}".
	Topic string
	// DeliveryTimeout bounds how long a record may wait to be produced
	// (kgo.RecordDeliveryTimeout, Kafka's delivery.timeout.ms). Keep it
	// below the relay's PublishTimeout so that a dead cluster surfaces as a
	// classified error. Default 10s.
	DeliveryTimeout time.Duration
	// RequestTimeout is the produce request's timeout: how long the leader
	// may wait for the in-sync replicas (kgo.ProduceRequestTimeout, Kafka's
	// request.timeout.ms). Default 5s.
	RequestTimeout time.Duration
	// MaxMessageBytes caps one record batch (kgo.ProducerBatchMaxBytes). Set
	// it to the topics' max.message.bytes when that is below Kafka's default
	// 1000012: a record larger than this fails at once with a permanent
	// error, and batches never grow past it. A larger cap makes the broker
	// reject a whole batch, failing every record in it, when the records
	// together exceed the topic's limit.
	MaxMessageBytes int32
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
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
)

// New validates cfg and returns a Publisher with its own franz-go client.
// It does not contact the cluster; Close releases the client.
func New(cfg Config) (*Publisher, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka: Config.Brokers: at least one seed broker is required")
	}
	for _, b := range cfg.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, fmt.Errorf("kafka: Config.Brokers: %q: want host:port: %w", b, err)
		}
	}
	topic, err := outbox.ParseTopicTemplate(cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: Config.Topic: %w", err)
	}
	if cfg.DeliveryTimeout == 0 {
		cfg.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	switch {
	case cfg.DeliveryTimeout < 100*time.Millisecond:
		return nil, fmt.Errorf("kafka: Config.DeliveryTimeout: %s: must be at least 100ms", cfg.DeliveryTimeout)
	case cfg.RequestTimeout < 100*time.Millisecond:
		return nil, fmt.Errorf("kafka: Config.RequestTimeout: %s: must be at least 100ms", cfg.RequestTimeout)
	case cfg.MaxMessageBytes < 1024:
		return nil, fmt.Errorf("kafka: Config.MaxMessageBytes: %d: must be at least 1024", cfg.MaxMessageBytes)
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
		return nil, fmt.Errorf("kafka: client options: %w", err)
	}
	if err := checkDurability(cl); err != nil {
		cl.Close()
		return nil, err
	}
	return &Publisher{cl: cl, topic: topic}, nil
}

// checkDurability refuses a client whose options would let Publish return
// before the record is durably stored, or break the producer's ordering and
// deduplication.
func checkDurability(cl *kgo.Client) error {
	bad := func(what string) error {
		return fmt.Errorf("kafka: Config.ClientOpts: %s is not allowed: the outbox needs acks=all and the idempotent producer", what)
	}
	if acks, _ := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return bad("RequiredAcks other than AllISRAcks")
	}
	if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return bad("DisableIdempotentWrite")
	}
	if v, _ := cl.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); v {
		return bad("AllowIdempotentProduceCancellation")
	}
	if v := cl.OptValues(kgo.TransactionalID); len(v) == 2 && v[1] == true {
		return bad("TransactionalID")
	}
	if v, _ := cl.OptValue(kgo.DefaultProduceTopicAlways).(bool); v {
		return bad("DefaultProduceTopicAlways")
	}
	return nil
}

// NewFromURL returns a Publisher configured by a URL, for command-line use:
//
//	kafka://broker1:9092,broker2:9092?topic={event_type}
//
// Query options: topic (topic template), delivery_timeout, request_timeout
// (Go durations), max_message_bytes, client_id, tls=true (TLS with the
// system roots), sasl=plain|scram-sha-256|scram-sha-512 with the user and
// password taken from the URL's user info. Errors never repeat the password.
func NewFromURL(u *url.URL) (*Publisher, error) {
	if u == nil {
		return nil, errors.New("kafka: URL is nil")
	}
	if u.Scheme != "kafka" {
		return nil, fmt.Errorf("kafka: URL %s: scheme must be kafka", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("kafka: URL %s: no brokers (want kafka://host:9092,host2:9092)", u.Redacted())
	}
	cfg := Config{}
	for _, b := range strings.Split(u.Host, ",") {
		if b = strings.TrimSpace(b); b != "" {
			if _, _, err := net.SplitHostPort(b); err != nil {
				b = net.JoinHostPort(b, "9092")
			}
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	q := u.Query()
	bad := func(key string, err error) (*Publisher, error) {
		return nil, fmt.Errorf("kafka: URL %s: %s=%q: %w", u.Redacted(), key, q.Get(key), err)
	}
	for key := range q {
		switch key {
		case "topic", "delivery_timeout", "request_timeout", "max_message_bytes", "client_id", "tls", "sasl":
		default:
			return nil, fmt.Errorf("kafka: URL %s: unknown option %q", u.Redacted(), key)
		}
	}
	cfg.Topic = q.Get("topic")
	var err error
	if s := q.Get("delivery_timeout"); s != "" {
		if cfg.DeliveryTimeout, err = time.ParseDuration(s); err != nil {
			return bad("delivery_timeout", err)
		}
	}
	if s := q.Get("request_timeout"); s != "" {
		if cfg.RequestTimeout, err = time.ParseDuration(s); err != nil {
			return bad("request_timeout", err)
		}
	}
	if s := q.Get("max_message_bytes"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return bad("max_message_bytes", err)
		}
		cfg.MaxMessageBytes = int32(n)
	}
	if s := q.Get("client_id"); s != "" {
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.ClientID(s))
	}
	if s := q.Get("tls"); s != "" {
		on, err := strconv.ParseBool(s)
		if err != nil {
			return bad("tls", err)
		}
		if on {
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
		}
	}
	if mech := q.Get("sasl"); mech != "" {
		user := u.User.Username()
		pass, _ := u.User.Password()
		if user == "" {
			return nil, fmt.Errorf("kafka: URL %s: sasl=%s needs a user and password in the URL", u.Redacted(), mech)
		}
		switch strings.ToLower(mech) {
		case "plain":
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		case "scram-sha-256":
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case "scram-sha-512":
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		default:
			return bad("sasl", errors.New("want plain, scram-sha-256 or scram-sha-512"))
		}
	} else if u.User != nil {
		return nil, fmt.Errorf("kafka: URL %s: user info given without sasl=", u.Redacted())
	}
	return New(cfg)
}

// Client returns the underlying franz-go client, for metrics hooks and
// administration. Producing through it bypasses the publisher's contract.
func (p *Publisher) Client() *kgo.Client { return p.cl }

// Topic returns the topic msg is produced to.
func (p *Publisher) Topic(msg *outbox.Message) string { return p.topic.Render(msg) }

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
// key = aggregate id, value = payload, headers = msg.StandardHeaders() in
// name order.
func (p *Publisher) Record(msg *outbox.Message) *kgo.Record {
	h := msg.StandardHeaders()
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	r := &kgo.Record{Topic: p.topic.Render(msg), Value: msg.Payload, Headers: make([]kgo.RecordHeader, len(names))}
	if msg.AggregateID != "" {
		r.Key = []byte(msg.AggregateID)
	}
	for i, k := range names {
		r.Headers[i] = kgo.RecordHeader{Key: k, Value: []byte(h[k])}
	}
	return r
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
		r := p.Record(msg)
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
	return classifyBatch(errs, topics)
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
		errs[i] = p.cl.ProduceSync(ctx, p.Record(msgs[i])).FirstErr()
	}
}

// classifyBatch wraps each failure with its class and the record's topic.
func classifyBatch(errs []error, topics []string) []error {
	for i, err := range errs {
		if err == nil || errors.Is(err, outbox.ErrPermanent) {
			continue
		}
		errs[i] = classify(fmt.Errorf("kafka: produce to topic %q: %w", topics[i], err))
	}
	return errs
}

// permanentErrs are broker answers that retrying cannot fix.
var permanentErrs = []error{
	kerr.MessageTooLarge,            // larger than max.message.bytes
	kerr.RecordListTooLarge,         // batch larger than the broker accepts
	kerr.UnknownTopicOrPartition,    // after the client's metadata retries
	kerr.UnknownTopicID,             //
	kerr.InvalidTopicException,      // illegal topic name
	kerr.TopicAuthorizationFailed,   // no WRITE ACL on the topic
	kerr.ClusterAuthorizationFailed, // no IDEMPOTENT_WRITE on the cluster
	kerr.InvalidRecord,              // the broker's record validation (e.g. a compacted topic)
	kerr.PolicyViolation,            //
}

func classify(err error) error {
	for _, pe := range permanentErrs {
		if errors.Is(err, pe) {
			return outbox.Permanent(err)
		}
	}
	switch {
	case errors.Is(err, kgo.ErrClientClosed):
		// The publisher was closed: nothing to retry against, but the
		// message is not at fault either.
		return outbox.Unavailable(err)
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState),
		errors.Is(err, kerr.UnsupportedSaslMechanism), isTLSError(err):
		// Wrong credentials fail every message alike: back off and keep
		// the events (the relay logs the error) rather than dead-letter
		// the whole table.
		return outbox.Unavailable(err)
	case outbox.Classify(err) == outbox.ClassUnavailable:
		return outbox.Unavailable(err) // dial errors, refused, reset, DNS
	case outageLike(err):
		// The record got no verdict from its partition's leader in time.
		// Kafka reports what is wrong with a record explicitly (the
		// permanent errors above), so a record that merely could not get
		// through is an availability problem even when other partitions'
		// records were acknowledged: a leader being moved, a cluster
		// coming back after an outage. Counting an attempt for it would
		// dead-letter healthy events during a long partial outage.
		return outbox.Unavailable(err)
	}
	return err
}

// outageLike reports errors meaning the record's leader could not be
// reached or did not answer in time.
func outageLike(err error) bool {
	if errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, kerr.RequestTimedOut) || errors.Is(err, kerr.BrokerNotAvailable) ||
		errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.NotEnoughReplicas) ||
		errors.Is(err, kerr.NotEnoughReplicasAfterAppend) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isTLSError(err error) bool {
	var (
		rec  tls.RecordHeaderError
		cert *tls.CertificateVerificationError
		alrt tls.AlertError
	)
	return errors.As(err, &rec) || errors.As(err, &cert) || errors.As(err, &alrt)
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
