package sqs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsurl"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Limits and defaults.
const (
	// DefaultMaxMessageBytes is the historical SQS limit (256 KiB), which
	// every queue accepts. Queues whose MaximumMessageSize is raised allow
	// up to MaxMessageBytesLimit.
	DefaultMaxMessageBytes = 256 << 10
	// MaxMessageBytesLimit is the largest message SQS accepts (1 MiB).
	MaxMessageBytesLimit = 1 << 20
	// DefaultConcurrency is how many SendMessageBatch calls one PublishBatch
	// keeps in flight: a relay batch of 100 goes out in one round.
	DefaultConcurrency = 10
	// maxEntries is SQS's limit on entries per SendMessageBatch call.
	maxEntries = 10
)

// AttrHeaders is the message attribute holding every header of the event
// (outbox.Message.StandardHeaders: the standard ones and the row's own) as
// one JSON object of strings. SQS allows only 10 attributes per message, so
// the row's headers travel here rather than as attributes of their own.
const AttrHeaders = "outbox-headers"

// API is the part of *sqs.Client the publisher uses; *sqs.Client implements
// it.
type API interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Client sends the requests; usually sqs.NewFromConfig(awsCfg). Its
	// retryer, credentials, region and endpoint are the caller's. Required.
	Client API
	// QueueURL is the destination queue's URL, or a template over the event
	// with outbox.ParseTopicTemplate's placeholders:
	// "https://sqs.eu-west-1.amazonaws.com/123456789012/{aggregate_type}-events.fifo".
	// A URL ending in ".fifo" is a FIFO queue: MessageGroupId = aggregate
	// id, MessageDeduplicationId = event id. Required.
	QueueURL string
	// MaxMessageBytes is the largest message sent: body plus attribute
	// names, types and values, as SQS counts. Larger ones fail permanently
	// without a request; at most 1 MiB (set it to the queue's
	// MaximumMessageSize). Defaults to DefaultMaxMessageBytes (256 KiB).
	MaxMessageBytes int
	// Concurrency is how many SendMessageBatch calls one PublishBatch keeps
	// in flight. Defaults to DefaultConcurrency (10).
	Concurrency int
	// CreateQueues lets the publisher create a queue a send found missing
	// (a standard queue, or a FIFO queue for a name ending in ".fifo", with
	// SQS's default attributes), then send again: opt-in topology creation.
	// Client must then also implement QueueCreator, as *sqs.Client does.
	// Off (the default): a missing queue is an outage naming the command
	// that creates it.
	CreateQueues bool
}

// QueueCreator is the part of *sqs.Client Config.CreateQueues needs.
type QueueCreator interface {
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, optFns ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
}

// Publisher is an outbox.BatchPublisher and outbox.HealthChecker for Amazon
// SQS. It is safe for concurrent use.
type Publisher struct {
	api         API
	queue       *outbox.TopicTemplate
	static      bool // QueueURL has no placeholder
	maxBytes    int
	concurrency int
	creator     QueueCreator // set with Config.CreateQueues
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
	if c, ok := cfg.Client.(*sqs.Client); ok && c.Options().Region == "" {
		// The SDK would fail every request (requests are signed for a
		// region), as a transient error: say it now.
		return nil, bad("Client", "has no region (set AWS_REGION, the profile's region, or sqs.Options.Region)")
	}
	if cfg.QueueURL == "" {
		return nil, bad("QueueURL", "required")
	}
	tmpl, err := outbox.ParseTopicTemplate(cfg.QueueURL)
	if err != nil {
		return nil, bad("QueueURL", "%w", err)
	}
	static := !strings.Contains(cfg.QueueURL, "{")
	if static {
		if err := checkQueueURL(cfg.QueueURL); err != nil {
			return nil, bad("QueueURL", "%w", err)
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
	p := &Publisher{api: cfg.Client, queue: tmpl, static: static, maxBytes: cfg.MaxMessageBytes, concurrency: cfg.Concurrency}
	if cfg.CreateQueues {
		creator, ok := cfg.Client.(QueueCreator)
		if !ok {
			return nil, bad("CreateQueues", "the Client (%T) has no CreateQueue method", cfg.Client)
		}
		p.creator = creator
	}
	return p, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "sqs.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

func checkQueueURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return fmt.Errorf("%q is not a queue URL (want https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)", s)
	}
	return nil
}

// QueueURL returns the queue msg is sent to.
func (p *Publisher) QueueURL(msg *outbox.Message) string { return p.queue.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "aws_sqs" }

// Destination implements outbox.Describer: the queue's name, the last
// segment of its URL.
func (p *Publisher) Destination(msg *outbox.Message) string { return queueName(p.queue.Render(msg)) }

// queueName returns NAME from https://sqs.REGION.amazonaws.com/ACCOUNT/NAME.
func queueName(queueURL string) string { return queueURL[strings.LastIndex(queueURL, "/")+1:] }

// Health asks SQS for the queue's ARN when QueueURL is a static URL; for a
// templated QueueURL there is no single queue to ask, and Health returns nil.
func (p *Publisher) Health(ctx context.Context) error {
	if !p.static {
		return nil
	}
	_, err := p.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(p.queue.String()), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return fmt.Errorf("sqs: GetQueueAttributes: %w", err)
	}
	return nil
}

// Publish sends msg and waits for SQS to accept it.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// entry is one message on its way: its index in the caller's batch.
type entry struct {
	i     int
	group string
	size  int
	e     types.SendMessageBatchRequestEntry
}

// Entry returns the SendMessageBatch entry msg becomes (with Id "0") and
// its size as SQS counts it.
func (p *Publisher) Entry(msg *outbox.Message) (types.SendMessageBatchRequestEntry, int, error) {
	e, err := p.entry(0, msg, strings.HasSuffix(p.queue.Render(msg), ".fifo"))
	return e.e, e.size, err
}

func (p *Publisher) entry(i int, msg *outbox.Message, fifo bool) (entry, error) {
	attrs := make(map[string]types.MessageAttributeValue, awsurl.MaxAttributes)
	body := msg.Payload
	size := 0
	add := func(name, value string) {
		if value == "" {
			return // SQS refuses empty attribute values; the JSON attribute still has it
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
	e := entry{i: i, size: size, e: types.SendMessageBatchRequestEntry{
		Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body)), MessageAttributes: attrs,
	}}
	if fifo {
		if err := checkGroupID(msg.AggregateID); err != nil {
			return e, fmt.Errorf("aggregate id as MessageGroupId: %w", err)
		}
		e.group = msg.AggregateID
		e.e.MessageGroupId = aws.String(msg.AggregateID)
		e.e.MessageDeduplicationId = aws.String(msg.ID.String())
	}
	if len(body) == 0 {
		return e, errors.New("empty payload: SQS refuses an empty message body")
	}
	if size > p.maxBytes {
		return e, fmt.Errorf("message of %d bytes (body %d plus attributes) exceeds the limit of %d bytes", size, len(body), p.maxBytes)
	}
	return e, nil
}

// checkGroupID applies SQS's MessageGroupId rules: 1 to 128 characters,
// alphanumeric or punctuation.
func checkGroupID(s string) error {
	if s == "" || len(s) > 128 {
		return fmt.Errorf("%d characters; SQS wants 1 to 128", len(s))
	}
	for _, c := range []byte(s) {
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("%q has a character SQS refuses (alphanumeric and punctuation only)", s)
		}
	}
	return nil
}

// PublishBatch sends the messages in SendMessageBatch calls of at most 10
// entries (and at most MaxMessageBytes together), Concurrency calls at a
// time, and maps every entry's result back to its message.
//
// For a FIFO queue, one aggregate's messages stay in order: they go to the
// same lane of calls, sent one after another, and once one of them fails
// the later ones in the batch are not sent (they fail with the same class),
// so a retry cannot land after its successor.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	byQueue := map[string][]entry{}
	var queues []string
	for i, msg := range msgs {
		q := p.queue.Render(msg)
		if !p.static {
			if err := checkQueueURL(q); err != nil {
				errs[i] = outbox.Permanent(fmt.Errorf("sqs: queue URL from template %q: %w", p.queue, err))
				continue
			}
		}
		e, err := p.entry(i, msg, strings.HasSuffix(q, ".fifo"))
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("sqs: %s: %w", q, err))
			continue
		}
		if _, ok := byQueue[q]; !ok {
			queues = append(queues, q)
		}
		byQueue[q] = append(byQueue[q], e)
	}

	// A job is a sequence of calls made one after another; jobs run
	// Concurrency at a time.
	var jobs [][]call
	for _, q := range queues {
		entries := byQueue[q]
		if !strings.HasSuffix(q, ".fifo") {
			for _, c := range p.chunk(q, entries) {
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
				jobs = append(jobs, p.chunk(q, lane))
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
	queue   string
	entries []entry
}

type result struct {
	i   int
	err error
}

// chunk splits entries, in order, into calls of at most 10 entries and
// MaxMessageBytes together.
func (p *Publisher) chunk(queue string, entries []entry) []call {
	var out []call
	cur := call{queue: queue}
	bytes := 0
	for _, e := range entries {
		if len(cur.entries) == maxEntries || (len(cur.entries) > 0 && bytes+e.size > p.maxBytes) {
			out = append(out, cur)
			cur, bytes = call{queue: queue}, 0
		}
		cur.entries = append(cur.entries, e)
		bytes += e.size
	}
	if len(cur.entries) > 0 {
		out = append(out, cur)
	}
	return out
}

// send makes one SendMessageBatch call, leaving out the entries of FIFO
// groups that already failed in this job, and records new group failures.
func (p *Publisher) send(ctx context.Context, c call, failed map[string]error) []result {
	var (
		out     []result
		entries = make([]types.SendMessageBatchRequestEntry, 0, len(c.entries))
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
		for _, e := range byID {
			fail(e, fmt.Errorf("sqs: not sent: %w", err))
		}
		return out
	}
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(c.queue), Entries: entries}
	resp, err := p.api.SendMessageBatch(ctx, in)
	if err != nil && p.creator != nil && p.queueMissing(err) {
		if cerr := p.createQueue(ctx, c.queue); cerr != nil {
			err = fmt.Errorf("%w (creating the queue: %w)", err, cerr)
		} else {
			resp, err = p.api.SendMessageBatch(ctx, in)
		}
	}
	if err != nil {
		err = classifyCall(fmt.Errorf("sqs: SendMessageBatch to %s: %w", c.queue, err), c.queue)
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
		err := fmt.Errorf("sqs: SendMessageBatch to %s: entry failed: %s: %s", c.queue, aws.ToString(f.Code), aws.ToString(f.Message))
		if f.SenderFault {
			err = outbox.Permanent(err) // the request was wrong: resending it cannot help
		}
		fail(e, err)
	}
	for _, e := range c.entries { // in request order, for FIFO groups
		if _, missing := byID[*e.e.Id]; missing {
			fail(e, fmt.Errorf("sqs: SendMessageBatch to %s: no result for entry %s", c.queue, *e.e.Id))
		}
	}
	return out
}

// queueMissing reports a SendMessageBatch error meaning the queue does not
// exist.
func (p *Publisher) queueMissing(err error) bool {
	var missing MissingQueueError
	return errors.As(classifyCall(err, ""), &missing)
}

// createQueue creates the queue queueURL names (Config.CreateQueues).
func (p *Publisher) createQueue(ctx context.Context, queueURL string) error {
	name := queueName(queueURL)
	in := &sqs.CreateQueueInput{QueueName: aws.String(name)}
	if strings.HasSuffix(name, ".fifo") {
		in.Attributes = map[string]string{string(types.QueueAttributeNameFifoQueue): "true"}
	}
	_, err := p.creator.CreateQueue(ctx, in)
	return err
}
