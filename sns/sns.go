package sns

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsurl"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Limits and defaults.
const (
	// DefaultMaxMessageBytes is SNS's default MaximumMessageSize (256 KiB),
	// which every topic accepts.
	DefaultMaxMessageBytes = 256 << 10
	// MaxMessageBytesLimit is the largest MaximumMessageSize a topic can
	// be given (1 MiB).
	MaxMessageBytesLimit = 1 << 20
	// DefaultConcurrency is how many PublishBatch calls one PublishBatch
	// of the relay keeps in flight: a relay batch of 100 goes out in one
	// round.
	DefaultConcurrency = 10
	// maxEntries is SNS's limit on entries per PublishBatch call.
	maxEntries = 10
)

// AttrHeaders is the message attribute holding every header of the event
// (outbox.Message.StandardHeaders: the standard ones and the row's own) as
// one JSON object of strings. An SQS subscription with raw message delivery
// receives at most 10 attributes per message, so the row's headers travel
// here rather than as attributes of their own: every event has 6 attributes
// whatever its headers.
const AttrHeaders = "outbox-headers"

// API is the part of *sns.Client the publisher uses; *sns.Client implements
// it.
type API interface {
	PublishBatch(ctx context.Context, in *sns.PublishBatchInput, optFns ...func(*sns.Options)) (*sns.PublishBatchOutput, error)
	GetTopicAttributes(ctx context.Context, in *sns.GetTopicAttributesInput, optFns ...func(*sns.Options)) (*sns.GetTopicAttributesOutput, error)
}

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Client sends the requests; usually sns.NewFromConfig(awsCfg). Its
	// retryer, credentials, region and endpoint are the caller's. Required.
	Client API
	// TopicARN is the destination topic's ARN, or a template over the
	// event with outbox.ParseTopicTemplate's placeholders:
	// "arn:aws:sns:eu-west-1:123456789012:{aggregate_type}-events". An ARN
	// ending in ".fifo" is a FIFO topic: MessageGroupId = aggregate id,
	// MessageDeduplicationId = event id. Required.
	TopicARN string
	// MaxMessageBytes is the largest message sent, and the most one
	// PublishBatch call carries: body plus attribute names, types and
	// values, as SNS counts. Larger messages fail permanently without a
	// request; at most 1 MiB (set it to the topic's MaximumMessageSize).
	// Defaults to DefaultMaxMessageBytes (256 KiB).
	MaxMessageBytes int
	// Concurrency is how many PublishBatch calls one relay batch keeps in
	// flight. Defaults to DefaultConcurrency (10).
	Concurrency int
}

// Publisher is an outbox.BatchPublisher and outbox.HealthChecker for Amazon
// SNS. It is safe for concurrent use.
type Publisher struct {
	api         API
	topic       *outbox.TopicTemplate
	static      bool // TopicARN has no placeholder
	maxBytes    int
	concurrency int
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// New validates cfg and returns a Publisher. It sends no request.
func New(cfg Config) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, bad("Client", "must not be nil")
	}
	if c, ok := cfg.Client.(*sns.Client); ok && c.Options().Region == "" {
		// The SDK would fail every request (requests are signed for a
		// region), as a transient error: say it now.
		return nil, bad("Client", "has no region (set AWS_REGION, the profile's region, or sns.Options.Region)")
	}
	if cfg.TopicARN == "" {
		return nil, bad("TopicARN", "required")
	}
	tmpl, err := outbox.ParseTopicTemplate(cfg.TopicARN)
	if err != nil {
		return nil, bad("TopicARN", "%w", err)
	}
	static := !strings.Contains(cfg.TopicARN, "{")
	if static {
		if _, err := awsurl.ParseARN(cfg.TopicARN, "sns"); err != nil {
			return nil, bad("TopicARN", "%w", err)
		}
	}
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	if cfg.MaxMessageBytes < 1024 || cfg.MaxMessageBytes > MaxMessageBytesLimit {
		return nil, bad("MaxMessageBytes", "%d: must be between 1024 and %d", cfg.MaxMessageBytes, MaxMessageBytesLimit)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	if cfg.Concurrency < 1 || cfg.Concurrency > 100 {
		return nil, bad("Concurrency", "%d: must be between 1 and 100", cfg.Concurrency)
	}
	return &Publisher{api: cfg.Client, topic: tmpl, static: static, maxBytes: cfg.MaxMessageBytes, concurrency: cfg.Concurrency}, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "sns.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// TopicARN returns the topic msg is published to.
func (p *Publisher) TopicARN(msg *outbox.Message) string { return p.topic.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "aws_sns" }

// Destination implements outbox.Describer: the topic's name, the last
// field of its ARN.
func (p *Publisher) Destination(msg *outbox.Message) string { return topicName(p.topic.Render(msg)) }

// topicName returns NAME from arn:aws:sns:REGION:ACCOUNT:NAME.
func topicName(arn string) string { return arn[strings.LastIndex(arn, ":")+1:] }

// Health asks SNS for the topic's attributes when TopicARN is a static
// ARN; for a templated TopicARN there is no single topic to ask, and Health
// returns nil.
func (p *Publisher) Health(ctx context.Context) error {
	if !p.static {
		return nil
	}
	arn := p.topic.String()
	if _, err := p.api.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(arn)}); err != nil {
		return classifyCall(fmt.Errorf("sns: GetTopicAttributes: %w", err), arn)
	}
	return nil
}

// Publish publishes msg and waits for SNS to accept it.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// entry is one message on its way: its index in the caller's batch.
type entry struct {
	i     int
	group string
	size  int
	e     types.PublishBatchRequestEntry
}

// Entry returns the PublishBatch entry msg becomes (with Id "0") and its
// size as SNS counts it.
func (p *Publisher) Entry(msg *outbox.Message) (types.PublishBatchRequestEntry, int, error) {
	e, err := p.entry(0, msg, strings.HasSuffix(p.topic.Render(msg), ".fifo"))
	return e.e, e.size, err
}

func (p *Publisher) entry(i int, msg *outbox.Message, fifo bool) (entry, error) {
	attrs := make(map[string]types.MessageAttributeValue, awsurl.MaxAttributes)
	body := msg.Payload
	size := 0
	add := func(name, value string) {
		if value == "" {
			return // SNS refuses empty attribute values; the JSON attribute still has it
		}
		attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
		size += len(name) + len("String") + len(value)
	}
	switch msg.Envelope {
	case outbox.EnvelopeCloudEvents:
		ce, err := msg.CloudEvent()
		if err != nil {
			return entry{}, err
		}
		list, _ := awsurl.CloudEventsAttributes(ce) // extensions past the limit: see the package doc
		for _, a := range list {
			add(a.Name, a.Value)
		}
	case outbox.EnvelopeCloudEventsStructured:
		b, err := msg.StructuredCloudEvent()
		if err != nil {
			return entry{}, err
		}
		body = b
		add(awsurl.AttrContentType, outboxtype.CloudEventsJSON)
	default:
		h := msg.StandardHeaders()
		all, err := json.Marshal(h)
		if err != nil {
			return entry{}, err
		}
		for _, k := range []string{outbox.HeaderEventID, outbox.HeaderEventType, outbox.HeaderAggregateType,
			outbox.HeaderAggregateID, outbox.HeaderCreatedAt} {
			add(k, h[k])
		}
		add(AttrHeaders, string(all))
	}
	size += len(body)
	e := entry{i: i, size: size, e: types.PublishBatchRequestEntry{
		Id: aws.String(strconv.Itoa(i)), Message: aws.String(string(body)), MessageAttributes: attrs,
	}}
	if fifo {
		if err := checkGroupID(msg.AggregateID); err != nil {
			return e, fmt.Errorf("aggregate id as MessageGroupId: %w", err)
		}
		e.group = msg.AggregateID
		e.e.MessageGroupId = aws.String(msg.AggregateID)
		e.e.MessageDeduplicationId = aws.String(msg.ID.String())
	}
	switch {
	case len(body) == 0:
		return e, errors.New("empty payload: SNS refuses an empty message")
	case !utf8.Valid(body):
		return e, errors.New("the payload is not UTF-8: SNS messages are text")
	case size > p.maxBytes:
		return e, fmt.Errorf("message of %d bytes (body %d plus attributes) exceeds the limit of %d bytes", size, len(body), p.maxBytes)
	}
	return e, nil
}

// checkGroupID applies SNS's MessageGroupId rules: 1 to 128 characters,
// alphanumeric or punctuation.
func checkGroupID(s string) error {
	if s == "" || len(s) > 128 {
		return fmt.Errorf("%d characters; SNS wants 1 to 128", len(s))
	}
	for _, c := range []byte(s) {
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("%q has a character SNS refuses (alphanumeric and punctuation only)", s)
		}
	}
	return nil
}

// PublishBatch publishes the messages in PublishBatch calls of at most 10
// entries (and at most MaxMessageBytes together), Concurrency calls at a
// time, and maps every entry's result back to its message.
//
// For a FIFO topic, one aggregate's messages stay in order: they go to the
// same lane of calls, sent one after another, and once one of them fails
// the later ones in the batch are not sent (they fail with the same class),
// so a retry cannot land after its successor.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	byTopic := map[string][]entry{}
	var topics []string
	for i, msg := range msgs {
		t := p.topic.Render(msg)
		if !p.static {
			if _, err := awsurl.ParseARN(t, "sns"); err != nil {
				errs[i] = outbox.Permanent(fmt.Errorf("sns: topic ARN from template %q: %w", p.topic, err))
				continue
			}
		}
		e, err := p.entry(i, msg, strings.HasSuffix(t, ".fifo"))
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("sns: %s: %w", t, err))
			continue
		}
		if _, ok := byTopic[t]; !ok {
			topics = append(topics, t)
		}
		byTopic[t] = append(byTopic[t], e)
	}

	// A job is a sequence of calls made one after another; jobs run
	// Concurrency at a time.
	var jobs [][]call
	for _, t := range topics {
		entries := byTopic[t]
		if !strings.HasSuffix(t, ".fifo") {
			for _, c := range p.chunk(t, entries) {
				jobs = append(jobs, []call{c})
			}
			continue
		}
		lanes := make([][]entry, p.concurrency)
		for _, e := range entries {
			h := fnv.New32a()
			h.Write([]byte(e.group))
			n := h.Sum32() % uint32(len(lanes))
			lanes[n] = append(lanes[n], e)
		}
		for _, lane := range lanes {
			if len(lane) > 0 {
				jobs = append(jobs, p.chunk(t, lane))
			}
		}
	}

	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, p.concurrency)
		mu  sync.Mutex // guards errs across jobs
	)
	for _, job := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			failed := map[string]error{} // FIFO: group -> the failure that stops it
			for _, c := range job {
				res := p.send(ctx, c, failed)
				mu.Lock()
				for _, r := range res {
					errs[r.i] = r.err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return outbox.ClassifyBatch(errs, serviceDown)
}

type call struct {
	topic   string
	entries []entry
}

type result struct {
	i   int
	err error
}

// chunk splits entries, in order, into calls of at most 10 entries and
// MaxMessageBytes together.
func (p *Publisher) chunk(topic string, entries []entry) []call {
	var out []call
	cur := call{topic: topic}
	bytes := 0
	for _, e := range entries {
		if len(cur.entries) == maxEntries || (len(cur.entries) > 0 && bytes+e.size > p.maxBytes) {
			out = append(out, cur)
			cur, bytes = call{topic: topic}, 0
		}
		cur.entries = append(cur.entries, e)
		bytes += e.size
	}
	if len(cur.entries) > 0 {
		out = append(out, cur)
	}
	return out
}

// send makes one PublishBatch call, leaving out the entries of FIFO groups
// that already failed in this job, and records new group failures.
func (p *Publisher) send(ctx context.Context, c call, failed map[string]error) []result {
	var (
		out     []result
		entries = make([]types.PublishBatchRequestEntry, 0, len(c.entries))
		byID    = make(map[string]entry, len(c.entries))
	)
	for _, e := range c.entries {
		if e.group != "" {
			if prev, ok := failed[e.group]; ok {
				out = append(out, result{e.i, blocked(e.group, prev)})
				continue
			}
		}
		entries = append(entries, e.e)
		byID[*e.e.Id] = e
	}
	if len(entries) == 0 {
		return out
	}
	fail := func(e entry, err error) {
		out = append(out, result{e.i, err})
		if e.group != "" {
			failed[e.group] = err
		}
	}
	if err := ctx.Err(); err != nil {
		for _, e := range c.entries {
			if _, ok := byID[*e.e.Id]; ok {
				fail(e, fmt.Errorf("sns: not sent: %w", err))
			}
		}
		return out
	}
	resp, err := p.api.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(c.topic), PublishBatchRequestEntries: entries})
	if err != nil {
		err = classifyCall(fmt.Errorf("sns: PublishBatch to %s: %w", c.topic, err), c.topic)
		for _, e := range c.entries {
			if _, sent := byID[*e.e.Id]; sent {
				fail(e, err)
			}
		}
		return out
	}
	for _, s := range resp.Successful {
		if e, ok := byID[aws.ToString(s.Id)]; ok {
			out = append(out, result{e.i, nil})
			delete(byID, aws.ToString(s.Id))
		}
	}
	for _, f := range resp.Failed {
		e, ok := byID[aws.ToString(f.Id)]
		if !ok {
			continue
		}
		delete(byID, aws.ToString(f.Id))
		fail(e, classifyEntry(c.topic, f))
	}
	for _, e := range c.entries { // in request order, for FIFO groups
		if _, missing := byID[*e.e.Id]; missing {
			fail(e, fmt.Errorf("sns: PublishBatch to %s: no result for entry %s", c.topic, *e.e.Id))
		}
	}
	return out
}
