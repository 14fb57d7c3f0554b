package eventbridge

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsurl"
	"github.com/pgoutbox/outbox/internal/envelope"
)

// Limits and defaults.
const (
	// DefaultEventBus is the account's default event bus, which always
	// exists.
	DefaultEventBus = "default"
	// DefaultSource is the events' source: "outbox.order" for an order's
	// events, so a rule can match an aggregate type on source.
	DefaultSource = "outbox.{aggregate_type}"
	// DefaultConcurrency is how many PutEvents calls one relay batch keeps
	// in flight: a relay batch of 100 goes out in one round.
	DefaultConcurrency = 10
	// MaxEntryBytes is EventBridge's limit on one entry, and on the
	// entries of one PutEvents call together (256 KiB), counted as the
	// EventBridge user guide counts it: 14 bytes for the time, then the
	// UTF-8 bytes of source, detail-type and detail.
	MaxEntryBytes = 256 << 10
	// BusCheckInterval is how long a DescribeEventBus that found the bus
	// holds before the next publish asks again.
	BusCheckInterval = time.Minute
	// maxEntries is EventBridge's limit on entries per PutEvents call.
	maxEntries = 10
	// timeBytes is what the Time field counts toward an entry's size.
	timeBytes = 14
)

// API is the part of *eventbridge.Client the publisher uses;
// *eventbridge.Client implements it.
type API interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
	DescribeEventBus(ctx context.Context, in *eventbridge.DescribeEventBusInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DescribeEventBusOutput, error)
}

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Client sends the requests; usually eventbridge.NewFromConfig(awsCfg).
	// Its retryer, credentials, region and endpoint are the caller's.
	// Required.
	Client API
	// EventBus is the event bus's name or ARN (an ARN for another
	// account's bus). Defaults to DefaultEventBus ("default").
	EventBus string
	// Source is each event's source, a template over the event with
	// outbox.ParseTopicTemplate's placeholders ("com.example.orders", or
	// "outbox.{aggregate_type}"). EventBridge reserves sources starting
	// with "aws.". Defaults to DefaultSource ("outbox.{aggregate_type}").
	Source string
	// Concurrency is how many PutEvents calls one relay batch keeps in
	// flight. Defaults to DefaultConcurrency (10).
	Concurrency int
	// SkipBusCheck turns off the DescribeEventBus the publisher makes
	// before publishing (then at most once per BusCheckInterval while the
	// bus exists). PutEvents to a bus that does not exist succeeds and
	// EventBridge drops the events, so without the check a misspelt or
	// deleted bus loses them silently; skip it only if the relay's role
	// cannot be granted events:DescribeEventBus. Defaults to false.
	SkipBusCheck bool
}

// Publisher is an outbox.BatchPublisher and outbox.HealthChecker for Amazon
// EventBridge. It is safe for concurrent use.
type Publisher struct {
	api         API
	bus         string
	source      *outbox.TopicTemplate
	concurrency int
	skipCheck   bool

	mu      sync.Mutex
	busOKAt time.Time // when DescribeEventBus last found the bus
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
	if c, ok := cfg.Client.(*eventbridge.Client); ok && c.Options().Region == "" {
		// The SDK would fail every request (requests are signed for a
		// region), as a transient error: say it now.
		return nil, bad("Client", "has no region (set AWS_REGION, the profile's region, or eventbridge.Options.Region)")
	}
	cfg.EventBus = cmp.Or(cfg.EventBus, DefaultEventBus)
	if strings.HasPrefix(cfg.EventBus, "arn:") {
		if _, err := awsurl.ParseARN(cfg.EventBus, "events"); err != nil || !strings.Contains(cfg.EventBus, ":event-bus/") {
			return nil, bad("EventBus", "%q is not an event bus ARN (want arn:aws:events:REGION:ACCOUNT:event-bus/NAME)", cfg.EventBus)
		}
	} else if len(cfg.EventBus) > 256 || strings.ContainsAny(cfg.EventBus, " :\t\n") {
		return nil, bad("EventBus", "%q is not an event bus name", cfg.EventBus)
	}
	cfg.Source = cmp.Or(cfg.Source, DefaultSource)
	src, err := outbox.ParseTopicTemplate(cfg.Source)
	if err != nil {
		return nil, bad("Source", "%w", err)
	}
	if strings.HasPrefix(cfg.Source, "aws.") {
		return nil, bad("Source", "%q: EventBridge reserves sources starting with \"aws.\"", cfg.Source)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	if cfg.Concurrency < 1 || cfg.Concurrency > 100 {
		return nil, bad("Concurrency", "%d: must be between 1 and 100", cfg.Concurrency)
	}
	return &Publisher{api: cfg.Client, bus: cfg.EventBus, source: src, concurrency: cfg.Concurrency, skipCheck: cfg.SkipBusCheck}, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "eventbridge.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "aws_eventbridge" }

// Destination implements outbox.Describer: the event bus's name.
func (p *Publisher) Destination(*outbox.Message) string { return busName(p.bus) }

// busName returns NAME from a bus name or arn:aws:events:REGION:ACCOUNT:event-bus/NAME.
func busName(bus string) string {
	if i := strings.LastIndex(bus, ":event-bus/"); i >= 0 {
		return bus[i+len(":event-bus/"):]
	}
	return bus
}

// Health asks EventBridge whether the event bus exists (DescribeEventBus);
// with SkipBusCheck it returns nil without a request.
func (p *Publisher) Health(ctx context.Context) error {
	if p.skipCheck {
		return nil
	}
	return p.describeBus(ctx)
}

func (p *Publisher) describeBus(ctx context.Context) error {
	if _, err := p.api.DescribeEventBus(ctx, &eventbridge.DescribeEventBusInput{Name: aws.String(p.bus)}); err != nil {
		return classifyBusCheck(err, p.bus)
	}
	p.mu.Lock()
	p.busOKAt = time.Now()
	p.mu.Unlock()
	return nil
}

// checkBus makes sure the bus exists before events are sent to it: once,
// then once per BusCheckInterval.
func (p *Publisher) checkBus(ctx context.Context) error {
	if p.skipCheck {
		return nil
	}
	p.mu.Lock()
	fresh := !p.busOKAt.IsZero() && time.Since(p.busOKAt) < BusCheckInterval
	p.mu.Unlock()
	if fresh {
		return nil
	}
	return p.describeBus(ctx)
}

// Publish sends msg and waits for EventBridge to accept it.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// Envelope is a decoded detail: the event's headers and payload.
type Envelope = envelope.Envelope

// Decode reads the detail of an event the publisher sent, as a target
// receives it (the "detail" member of the event), giving back the outbox
// event's headers (Headers["outbox-event-id"] is the inbox's dedup key) and
// payload.
func Decode(detail []byte) (Envelope, error) { return envelope.Decode(detail) }

// Entry returns the PutEvents entry msg becomes and its size as
// EventBridge counts it.
func (p *Publisher) Entry(msg *outbox.Message) (types.PutEventsRequestEntry, int, error) {
	return p.entry(msg)
}

func (p *Publisher) entry(msg *outbox.Message) (types.PutEventsRequestEntry, int, error) {
	source := p.source.Render(msg)
	switch {
	case source == "" || utf8.RuneCountInString(source) > 256:
		return types.PutEventsRequestEntry{}, 0, fmt.Errorf("source %q: EventBridge wants 1 to 256 characters", source)
	case strings.HasPrefix(source, "aws."):
		return types.PutEventsRequestEntry{}, 0, fmt.Errorf("source %q: EventBridge reserves sources starting with \"aws.\"", source)
	case msg.EventType == "" || utf8.RuneCountInString(msg.EventType) > 128:
		return types.PutEventsRequestEntry{}, 0, fmt.Errorf("event type %q as detail-type: EventBridge wants 1 to 128 characters", msg.EventType)
	}
	detail, err := envelope.Body(msg)
	if err != nil {
		return types.PutEventsRequestEntry{}, 0, fmt.Errorf("detail: %w", err)
	}
	e := types.PutEventsRequestEntry{
		EventBusName: aws.String(p.bus), Source: aws.String(source), DetailType: aws.String(msg.EventType), Detail: aws.String(string(detail)),
	}
	size := len(source) + len(msg.EventType) + len(detail)
	if !msg.CreatedAt.IsZero() {
		e.Time = aws.Time(msg.CreatedAt)
		size += timeBytes
	}
	if size > MaxEntryBytes {
		return e, size, fmt.Errorf("entry of %d bytes (payload %d plus the envelope, source and detail-type) exceeds EventBridge's limit of %d bytes", size, len(msg.Payload), MaxEntryBytes)
	}
	return e, size, nil
}

type entry struct {
	i    int
	size int
	e    types.PutEventsRequestEntry
}

// PublishBatch checks the event bus (see SkipBusCheck), then sends the
// messages in PutEvents calls of at most 10 entries (and at most
// MaxEntryBytes together), Concurrency calls at a time, and maps every
// entry's result back to its message. EventBridge keeps no order, so
// neither does PublishBatch.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	var entries []entry
	for i, msg := range msgs {
		e, size, err := p.entry(msg)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("eventbridge: event bus %s: %w", p.bus, err))
			continue
		}
		entries = append(entries, entry{i: i, size: size, e: e})
	}
	if len(entries) == 0 {
		return errs
	}
	if err := p.checkBus(ctx); err != nil {
		for _, e := range entries {
			errs[e.i] = err
		}
		return outbox.ClassifyBatch(errs, serviceDown)
	}

	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, p.concurrency)
	)
	for _, c := range chunk(entries) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p.send(ctx, c, errs) // each call writes its own entries' errs
		})
	}
	wg.Wait()
	return outbox.ClassifyBatch(errs, serviceDown)
}

// chunk splits entries, in order, into calls of at most 10 entries and
// MaxEntryBytes together.
func chunk(entries []entry) [][]entry {
	var out [][]entry
	var cur []entry
	bytes := 0
	for _, e := range entries {
		if len(cur) == maxEntries || (len(cur) > 0 && bytes+e.size > MaxEntryBytes) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, e)
		bytes += e.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// send makes one PutEvents call and records each entry's result in errs.
func (p *Publisher) send(ctx context.Context, c []entry, errs []error) {
	if err := ctx.Err(); err != nil {
		for _, e := range c {
			errs[e.i] = fmt.Errorf("eventbridge: not sent: %w", err)
		}
		return
	}
	in := &eventbridge.PutEventsInput{Entries: make([]types.PutEventsRequestEntry, len(c))}
	for k, e := range c {
		in.Entries[k] = e.e
	}
	resp, err := p.api.PutEvents(ctx, in)
	if err != nil {
		err = classifyCall(fmt.Errorf("eventbridge: PutEvents to %s: %w", p.bus, err), p.bus)
		for _, e := range c {
			errs[e.i] = err
		}
		return
	}
	if len(resp.Entries) != len(c) {
		// Results correspond to entries by position only: with a count
		// that differs, none can be trusted.
		for _, e := range c {
			errs[e.i] = fmt.Errorf("eventbridge: PutEvents to %s: %d results for %d entries", p.bus, len(resp.Entries), len(c))
		}
		return
	}
	for k, r := range resp.Entries {
		switch {
		case r.ErrorCode != nil:
			errs[c[k].i] = classifyEntry(p.bus, aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
		case r.EventId == nil:
			errs[c[k].i] = fmt.Errorf("eventbridge: PutEvents to %s: entry %d has neither an event id nor an error", p.bus, k)
		}
	}
}
