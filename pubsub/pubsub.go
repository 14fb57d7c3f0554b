package pubsub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	gpubsub "cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults for Config's zero values, and Pub/Sub's limits.
const (
	// DefaultPublishTimeout stays below the relay's default PublishTimeout
	// (15s), so that a service that does not answer fails a message with a
	// classified error before the relay gives up on the batch.
	DefaultPublishTimeout = 10 * time.Second
	// MaxMessageBytesLimit is Pub/Sub's limit on one publish request, and so
	// on one message: 10 MB.
	MaxMessageBytesLimit int = gpubsub.MaxPublishRequestBytes
	// DefaultMaxMessageBytes is MaxMessageBytesLimit.
	DefaultMaxMessageBytes = MaxMessageBytesLimit

	maxAttributes     = 100  // attributes per message
	maxAttrKeyBytes   = 256  // bytes of an attribute's name
	maxAttrValueBytes = 1024 // bytes of an attribute's value
	maxOrderingKey    = 1024 // bytes of an ordering key
)

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Client sends the requests; usually pubsub.NewClient(ctx, project).
	// Its project, credentials and endpoint are the caller's; Close does
	// not close it. Required.
	Client *gpubsub.Client
	// Topic is a topic template (outbox.ParseTopicTemplate) giving each
	// message's topic: a topic ID in the Client's project ("{event_type}",
	// "orders-{aggregate_type}") or a full name
	// ("projects/PROJECT/topics/{event_type}"). A rendered ID Pub/Sub
	// cannot accept fails permanently before anything is sent. Defaults to
	// outbox.DefaultTopicTemplate ("{event_type}").
	Topic string
	// PublishTimeout bounds one message's publish, the client's own retries
	// included (pubsub.PublishSettings.Timeout). Keep it below the relay's
	// PublishTimeout, so that a service that does not answer surfaces as a
	// classified error. Defaults to DefaultPublishTimeout (10s).
	PublishTimeout time.Duration
	// MaxMessageBytes is the largest message sent, as Pub/Sub counts it
	// (data, attributes and ordering key, encoded); a larger one fails
	// permanently without a request. Defaults to DefaultMaxMessageBytes
	// (10 MB), the most Pub/Sub accepts.
	MaxMessageBytes int
	// DisableOrdering publishes without ordering keys. By default each
	// message's ordering key is its aggregate id, so a subscription with
	// message ordering enabled delivers one aggregate's events in order;
	// the price is one publish request per aggregate and batch, and Pub/Sub's
	// limit of 1 MB/s per ordering key. Defaults to false.
	DisableOrdering bool
	// CreateTopics lets the publisher create a topic a publish found
	// missing, then publish the refused messages again: opt-in topology
	// creation (the relay's credentials then also need
	// pubsub.topics.create). Defaults to false: a missing topic is an
	// outage naming the command that creates it.
	CreateTopics bool
}

// Publisher is an outbox.BatchPublisher and outbox.HealthChecker for Google
// Cloud Pub/Sub. It is safe for concurrent use.
type Publisher struct {
	client     *gpubsub.Client
	ownsClient bool // made by Dial: Close closes it
	topic      *outbox.TopicTemplate
	static     bool // Topic has no placeholder
	timeout    time.Duration
	maxBytes   int
	ordered    bool
	create     bool

	mu      sync.Mutex
	topics  map[string]*gpubsub.Publisher // full topic name -> its publisher
	stopped bool
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// New validates cfg and returns a Publisher. It sends no request.
func New(cfg Config) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, bad("Config", "Client", "must not be nil")
	}
	tmpl, err := outbox.ParseTopicTemplate(cfg.Topic)
	if err != nil {
		return nil, bad("Config", "Topic", "%w", err)
	}
	p := &Publisher{client: cfg.Client, topic: tmpl, static: !strings.Contains(tmpl.String(), "{"),
		timeout: cfg.PublishTimeout, maxBytes: cfg.MaxMessageBytes, ordered: !cfg.DisableOrdering,
		create: cfg.CreateTopics, topics: map[string]*gpubsub.Publisher{}}
	if p.static {
		if _, err := p.fullName(tmpl.String()); err != nil {
			return nil, bad("Config", "Topic", "%w", err)
		}
	}
	p.timeout = cmp.Or(p.timeout, DefaultPublishTimeout)
	if p.timeout < 100*time.Millisecond {
		return nil, bad("Config", "PublishTimeout", "%s: must be at least 100ms", p.timeout)
	}
	p.maxBytes = cmp.Or(p.maxBytes, DefaultMaxMessageBytes)
	if p.maxBytes < 1024 || p.maxBytes > MaxMessageBytesLimit {
		return nil, bad("Config", "MaxMessageBytes", "%d: must be between 1024 and %d", p.maxBytes, MaxMessageBytesLimit)
	}
	return p, nil
}

// bad returns the *outbox.ConfigError for field of config ("Config",
// "DialConfig").
func bad(config, field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "pubsub." + config, Field: field, Err: fmt.Errorf(format, args...)}
}

// fullName returns projects/PROJECT/topics/ID for a rendered topic, an ID or
// a full name, after checking the ID against Pub/Sub's rules.
func (p *Publisher) fullName(topic string) (string, error) {
	project, id := p.client.Project(), topic
	if strings.HasPrefix(topic, "projects/") {
		parts := strings.Split(topic, "/")
		if len(parts) != 4 || parts[1] == "" || parts[2] != "topics" {
			return "", fmt.Errorf("topic %q: want an ID or projects/PROJECT/topics/ID", topic)
		}
		project, id = parts[1], parts[3]
	}
	if err := validTopicID(id); err != nil {
		return "", fmt.Errorf("topic %q: %w", topic, err)
	}
	return "projects/" + project + "/topics/" + id, nil
}

// validTopicID applies Pub/Sub's resource name rules: 3 to 255 characters,
// starting with a letter, of letters, digits and - _ . ~ + %, not starting
// with "goog".
func validTopicID(id string) error {
	switch {
	case len(id) < 3 || len(id) > 255:
		return fmt.Errorf("a topic ID has 3 to 255 characters, not %d", len(id))
	case !(id[0] >= 'a' && id[0] <= 'z' || id[0] >= 'A' && id[0] <= 'Z'):
		return errors.New("a topic ID starts with a letter")
	case strings.HasPrefix(strings.ToLower(id), "goog"):
		return errors.New(`a topic ID cannot start with "goog"`)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.~+%", c)) {
			return fmt.Errorf("a topic ID has only letters, digits and - _ . ~ + %%, not %q", c)
		}
	}
	return nil
}

// publisher returns the client's publisher for the topic name, made once and
// kept until Close: the client batches per publisher.
func (p *Publisher) publisher(name string) (*gpubsub.Publisher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, gpubsub.ErrPublisherStopped
	}
	if t, ok := p.topics[name]; ok {
		return t, nil
	}
	t := p.client.Publisher(name)
	t.EnableMessageOrdering = p.ordered
	t.PublishSettings.Timeout = p.timeout
	// A relay batch is handed over at once: send it without the default
	// 10ms wait for more, in requests as large as Pub/Sub takes.
	t.PublishSettings.DelayThreshold = time.Millisecond
	t.PublishSettings.CountThreshold = gpubsub.MaxPublishRequestCount
	p.topics[name] = t
	return t, nil
}

// Close sends what the client still holds, stops its publishers, and closes
// the client if Dial (or NewFromURL) made it; a Config.Client is the
// caller's to close.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.stopped = true
	topics := p.topics
	p.topics = map[string]*gpubsub.Publisher{}
	p.mu.Unlock()
	for _, t := range topics {
		t.Stop()
	}
	if p.ownsClient {
		return p.client.Close()
	}
	return nil
}

// Topic returns the topic msg is published to, as rendered from the
// template (an ID or a full name).
func (p *Publisher) Topic(msg *outbox.Message) string { return p.topic.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "gcp_pubsub" }

// Destination implements outbox.Describer: the topic ID.
func (p *Publisher) Destination(msg *outbox.Message) string {
	t := p.topic.Render(msg)
	return t[strings.LastIndex(t, "/")+1:]
}

// Health asks Pub/Sub for the topic when Topic is a static name; for a
// templated Topic there is no single topic to ask, and Health returns nil.
// A permission error counts as healthy: the service answered, and a relay
// allowed to publish (roles/pubsub.publisher) may not be allowed to read the
// topic.
func (p *Publisher) Health(ctx context.Context) error {
	if !p.static {
		return nil
	}
	name, err := p.fullName(p.topic.String())
	if err != nil {
		return err
	}
	_, err = p.client.TopicAdminClient.GetTopic(ctx, &pb.GetTopicRequest{Topic: name})
	if err != nil && status.Code(err) != codes.PermissionDenied {
		return fmt.Errorf("pubsub: get topic %s: %w", name, err)
	}
	return nil
}

// The Pub/Sub protocol binding's attribute names: each CloudEvents
// attribute travels as ce-<name> (binary content mode, canonical strings,
// no percent-encoding), datacontenttype or the event format as
// Content-Type.
const (
	AttrCloudEventsPrefix = "ce-"
	AttrContentType       = "Content-Type"
)

// Message returns the Pub/Sub message msg becomes: ordering key =
// aggregate id (unless Config.DisableOrdering) and, in msg.Envelope, data =
// payload with attributes = msg.StandardHeaders() (the outbox's format); or
// the Pub/Sub binding's binary content mode (data = payload, one ce-
// attribute per CloudEvents attribute, Content-Type = application/json) or
// structured mode (data = the JSON event format, Content-Type =
// application/cloudevents+json). It fails when Pub/Sub would refuse the
// message, or no CloudEvent can carry it.
func (p *Publisher) Message(msg *outbox.Message) (*gpubsub.Message, error) {
	m := &gpubsub.Message{Data: msg.Payload}
	switch msg.Envelope {
	case outbox.EnvelopeCloudEvents:
		ce, err := msg.CloudEvent()
		if err != nil {
			return nil, err
		}
		attrs := ce.Attributes()
		m.Attributes = make(map[string]string, len(attrs)+1)
		for _, a := range attrs {
			m.Attributes[AttrCloudEventsPrefix+a.Name] = a.Value
		}
		m.Attributes[AttrContentType] = ce.DataContentType
	case outbox.EnvelopeCloudEventsStructured:
		body, err := msg.StructuredCloudEvent()
		if err != nil {
			return nil, err
		}
		m.Data, m.Attributes = body, map[string]string{AttrContentType: outboxtype.CloudEventsJSON}
	default:
		m.Attributes = msg.StandardHeaders()
	}
	if p.ordered {
		m.OrderingKey = msg.AggregateID
	}
	if len(m.Attributes) > maxAttributes {
		return nil, fmt.Errorf("%d attributes (the event's headers and the 5 standard ones); Pub/Sub allows %d", len(m.Attributes), maxAttributes)
	}
	for k, v := range m.Attributes {
		switch {
		case k == "" || len(k) > maxAttrKeyBytes:
			return nil, fmt.Errorf("header %.64q: Pub/Sub wants an attribute name of 1 to %d bytes", k, maxAttrKeyBytes)
		case strings.HasPrefix(strings.ToLower(k), "goog"):
			return nil, fmt.Errorf(`header %.64q: Pub/Sub reserves attribute names starting with "goog"`, k)
		case len(v) > maxAttrValueBytes:
			return nil, fmt.Errorf("header %.64q: a value of %d bytes; Pub/Sub allows %d", k, len(v), maxAttrValueBytes)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return nil, fmt.Errorf("header %.64q: not valid UTF-8", k)
		}
	}
	if len(m.OrderingKey) > maxOrderingKey || !utf8.ValidString(m.OrderingKey) {
		return nil, fmt.Errorf("aggregate id %.64q: an ordering key is valid UTF-8 of at most %d bytes", m.OrderingKey, maxOrderingKey)
	}
	if n := proto.Size(&pb.PubsubMessage{Data: m.Data, Attributes: m.Attributes, OrderingKey: m.OrderingKey}); n > p.maxBytes {
		return nil, fmt.Errorf("message of %d bytes (payload, attributes and ordering key) exceeds MaxMessageBytes %d", n, p.maxBytes)
	}
	return m, nil
}

// Publish sends msg and waits for Pub/Sub's answer.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// sent is one message handed to the client.
type sent struct {
	i     int
	topic string // full name
	pub   *gpubsub.Publisher
	msg   *gpubsub.Message
	res   *gpubsub.PublishResult
}

// keyOf names an ordering key within its topic.
func (s *sent) keyOf() string { return s.topic + "\x00" + s.msg.OrderingKey }

// PublishBatch hands every message to the client, which sends them in
// requests of one ordering key each, then waits for every result: one
// pipelined round for the whole batch, one result per message.
//
// A failed request pauses its ordering key in the client, so that an
// aggregate's later messages of the batch fail too rather than overtake it;
// once every message of the key has its result, the publisher resumes the
// key (pubsub.Publisher.ResumePublish) for the batches that follow.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	var out []*sent
	for i, msg := range msgs {
		if err := ctx.Err(); err != nil {
			// The relay gave up on this batch: what is not handed over yet
			// must not go out behind its back.
			errs[i] = fmt.Errorf("pubsub: not published: %w", err)
			continue
		}
		rendered := p.topic.Render(msg)
		name, err := p.fullName(rendered)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("pubsub: topic from template %q: %w", p.topic, err))
			continue
		}
		m, err := p.Message(msg)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("pubsub: %s: %w", name, err))
			continue
		}
		t, err := p.publisher(name)
		if err != nil {
			errs[i] = outbox.Unavailable(fmt.Errorf("pubsub: %s: %w", name, err))
			continue
		}
		out = append(out, &sent{i: i, topic: name, pub: t, msg: m, res: t.Publish(ctx, m)})
	}
	p.resumeWhenDone(out)
	for _, s := range out {
		select {
		case <-s.res.Ready():
			_, errs[s.i] = s.res.Get(ctx)
		case <-ctx.Done():
			errs[s.i] = fmt.Errorf("pubsub: waiting for the publish result: %w", ctx.Err())
		}
	}
	p.retryAlone(ctx, out, errs)
	p.createMissing(ctx, out, errs)
	p.classify(out, errs)
	return outbox.ClassifyBatch(errs, nil)
}

// resumeWhenDone resumes each ordering key of out that failed, once every
// message of the key has its result, even one arriving after PublishBatch
// returned (the client keeps trying until PublishTimeout): a key left
// paused would fail every later event of its aggregate.
func (p *Publisher) resumeWhenDone(out []*sent) {
	byKey := map[string][]*sent{}
	for _, s := range out {
		if s.msg.OrderingKey != "" {
			byKey[s.keyOf()] = append(byKey[s.keyOf()], s)
		}
	}
	for _, group := range byKey {
		go func() {
			failed := false
			for _, s := range group {
				<-s.res.Ready()
				_, err := s.res.Get(context.Background())
				failed = failed || err != nil
			}
			if failed {
				group[0].pub.ResumePublish(group[0].msg.OrderingKey)
			}
		}()
	}
}

// resume resumes s's ordering key before publishing it again.
func resume(s *sent) {
	if s.msg.OrderingKey != "" {
		s.pub.ResumePublish(s.msg.OrderingKey)
	}
}

// republish publishes s again and waits for its result.
func (p *Publisher) republish(ctx context.Context, s *sent) error {
	resume(s)
	r := s.pub.Publish(ctx, s.msg)
	select {
	case <-r.Ready():
		_, err := r.Get(ctx)
		if err != nil {
			resume(s)
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("pubsub: waiting for the publish result: %w", ctx.Err())
	}
}

// retryAlone publishes again, one at a time, the messages refused together
// as invalid: Pub/Sub judges a request as a whole, so one message it refuses
// would fail the healthy ones sent with it. Alone, each gets its own
// verdict. They go one after another, in their original order, so one
// aggregate's order holds; once one fails, its aggregate's later ones wait.
func (p *Publisher) retryAlone(ctx context.Context, out []*sent, errs []error) {
	var refused []*sent
	for _, s := range out {
		if err := errs[s.i]; err != nil && (status.Code(err) == codes.InvalidArgument || isPaused(err)) {
			refused = append(refused, s)
		}
	}
	invalid := 0
	for _, s := range refused {
		if status.Code(errs[s.i]) == codes.InvalidArgument {
			invalid++
		}
	}
	if invalid < 2 {
		return // a message refused alone is the invalid one
	}
	failed := map[string]bool{}
	for _, s := range refused {
		if failed[s.keyOf()] {
			// Held back: an earlier event of its aggregate failed.
			errs[s.i] = gpubsub.ErrPublishingPaused{OrderingKey: s.msg.OrderingKey}
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[s.i] = fmt.Errorf("pubsub: not published again after its request was refused: %w", err)
		} else {
			errs[s.i] = p.republish(ctx, s)
		}
		if errs[s.i] != nil && s.msg.OrderingKey != "" {
			failed[s.keyOf()] = true
		}
	}
}

// createMissing, with Config.CreateTopics, creates the topics messages were
// refused for as missing and publishes those messages again (and those of
// their ordering keys held back behind them), one at a time in their
// original order, so one aggregate's order holds.
func (p *Publisher) createMissing(ctx context.Context, out []*sent, errs []error) {
	if !p.create {
		return
	}
	created := map[string]error{} // topic -> the creation's error
	for _, s := range out {
		if _, done := created[s.topic]; !done && status.Code(errs[s.i]) == codes.NotFound {
			created[s.topic] = p.createTopic(ctx, s.topic)
		}
	}
	failed := map[string]bool{}
	for _, s := range out {
		cerr, missing := created[s.topic]
		err := errs[s.i]
		switch {
		case !missing || err == nil || !(status.Code(err) == codes.NotFound || isPaused(err)):
		case failed[s.keyOf()]:
			errs[s.i] = gpubsub.ErrPublishingPaused{OrderingKey: s.msg.OrderingKey}
		case cerr != nil:
			errs[s.i] = fmt.Errorf("%w (creating the topic: %w)", err, cerr)
		case ctx.Err() != nil:
			errs[s.i] = fmt.Errorf("pubsub: not published again after creating its topic: %w", ctx.Err())
		default:
			if errs[s.i] = p.republish(ctx, s); errs[s.i] != nil && s.msg.OrderingKey != "" {
				failed[s.keyOf()] = true
			}
		}
	}
}

// createTopic creates the topic; one that exists by now is fine.
func (p *Publisher) createTopic(ctx context.Context, name string) error {
	_, err := p.client.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: name})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return err
	}
	return nil
}

// classify wraps each failure with its class. A message that failed only
// because an earlier one of its ordering key did (the key was paused) takes
// that failure's class if it was an outage, and is transient otherwise: it
// was never judged itself.
func (p *Publisher) classify(out []*sent, errs []error) {
	cause := map[string]error{}
	for _, s := range out {
		if err := errs[s.i]; err != nil && !isPaused(err) {
			errs[s.i] = classify(fmt.Errorf("pubsub: publish to %s: %w", s.topic, err), s.topic)
			if _, ok := cause[s.keyOf()]; !ok {
				cause[s.keyOf()] = errs[s.i]
			}
		}
	}
	for _, s := range out {
		if err := errs[s.i]; err != nil && isPaused(err) {
			errs[s.i] = blocked(s.topic, s.msg.OrderingKey, err, cause[s.keyOf()])
		}
	}
}
