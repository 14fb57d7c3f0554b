package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults of Config's and DialConfig's fields, used for their zero values.
const (
	// DefaultMaxPending is Config.MaxPending's default.
	DefaultMaxPending = 4000
	// DefaultName is DialConfig.Name's default.
	DefaultName = "pgoutbox"
)

// Config configures a Publisher. New rejects invalid values with an
// *outbox.ConfigError naming the field.
type Config struct {
	// Subject is a topic template (outbox.ParseTopicTemplate) giving each
	// message's subject; use "orders.{aggregate_id}" and the like for a
	// subject per aggregate. Defaults to outbox.DefaultTopicTemplate
	// ("{event_type}").
	Subject string
	// MaxPending bounds unacknowledged asynchronous publishes. Defaults to
	// DefaultMaxPending (4000).
	MaxPending int
	// EnsureStream, when set, names a stream the publisher creates, or
	// updates to add StreamSubjects, before its first publish (and again
	// after a publish finds no stream), unless an existing stream of any
	// name already captures them (see the EnsureStream function): opt-in
	// topology creation. Empty (the default): the publisher creates
	// nothing, and a subject no stream captures is an outage naming the
	// command that fixes it.
	EnsureStream string
	// StreamSubjects are the subjects EnsureStream's stream captures.
	// Defaults to StreamSubjectsFor(Subject): the template's literal tokens
	// up to its first placeholder, then ">" ("nc.cli.{event_type}" ->
	// "nc.cli.>"); a template starting with a placeholder needs them set.
	StreamSubjects []string
}

// Publisher is an outbox.Publisher and outbox.BatchPublisher for JetStream.
// It is safe for concurrent use.
type Publisher struct {
	nc      *natsgo.Conn
	owned   bool // connected by Dial: Close closes it
	js      jetstream.JetStream
	subject *outbox.TopicTemplate

	stream   string   // Config.EnsureStream
	subjects []string // its subjects
	ensureMu sync.Mutex
	ensured  atomic.Bool
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// New returns a Publisher over nc, which the caller owns (and closes).
func New(nc *natsgo.Conn, cfg Config) (*Publisher, error) {
	if nc == nil {
		return nil, errors.New("nats: connection is nil")
	}
	subj, err := outbox.ParseTopicTemplate(cfg.Subject)
	if err != nil {
		return nil, bad("Config", "Subject", "%w", err)
	}
	cfg.MaxPending = cmp.Or(cfg.MaxPending, DefaultMaxPending)
	if cfg.MaxPending < 1 {
		return nil, bad("Config", "MaxPending", "%d must be positive", cfg.MaxPending)
	}
	p := &Publisher{nc: nc, subject: subj, stream: cfg.EnsureStream, subjects: cfg.StreamSubjects}
	if cfg.EnsureStream != "" {
		if strings.ContainsAny(cfg.EnsureStream, " \t.*>/\\") {
			return nil, bad("Config", "EnsureStream", "%q: a stream name cannot contain white space, '.', '*', '>', '/' or '\\'", cfg.EnsureStream)
		}
		if len(p.subjects) == 0 {
			if p.subjects, err = StreamSubjectsFor(cfg.Subject); err != nil {
				return nil, bad("Config", "StreamSubjects", "required with EnsureStream: %w", err)
			}
		}
		for _, subj := range p.subjects {
			if strings.Contains("."+subj+".", "..") {
				return nil, bad("Config", "StreamSubjects", "%q has an empty token", subj)
			}
		}
	} else if len(cfg.StreamSubjects) > 0 {
		return nil, bad("Config", "StreamSubjects", "set without Config.EnsureStream")
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending))
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	p.js = js
	return p, nil
}

// bad returns the *outbox.ConfigError for field of config ("Config",
// "DialConfig").
func bad(config, field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "nats." + config, Field: field, Err: fmt.Errorf(format, args...)}
}

// Close closes the connection if Dial (or NewFromURL) opened it; a
// connection given to New is the caller's to close.
func (p *Publisher) Close() error {
	if p.owned {
		p.nc.Close()
	}
	return nil
}

// ensureStream creates or updates Config.EnsureStream once, and again after
// a publish found no stream (someone deleted it).
func (p *Publisher) ensureStream(ctx context.Context) error {
	if p.stream == "" || p.ensured.Load() {
		return nil
	}
	p.ensureMu.Lock()
	defer p.ensureMu.Unlock()
	if p.ensured.Load() {
		return nil
	}
	if err := EnsureStream(ctx, p.nc, p.stream, p.subjects, 0); err != nil {
		return err
	}
	p.ensured.Store(true)
	return nil
}

// Subject returns the subject msg is published to.
func (p *Publisher) Subject(msg *outbox.Message) string { return p.subject.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "nats" }

// Destination implements outbox.Describer: the subject.
func (p *Publisher) Destination(msg *outbox.Message) string { return p.subject.Render(msg) }

// natsMsg returns the message msg becomes, in its Envelope: the NATS
// binding's binary content mode (ce- headers, percent-encoded values) or
// structured mode (Content-Type: application/cloudevents+json), or the
// outbox's own headers. An error is about the message: permanent.
func (p *Publisher) natsMsg(msg *outbox.Message) (*natsgo.Msg, error) {
	m := natsgo.NewMsg(p.subject.Render(msg))
	switch msg.Envelope {
	case outbox.EnvelopeCloudEvents:
		ce, err := msg.CloudEvent()
		if err != nil {
			return nil, err
		}
		for _, a := range ce.Attributes() {
			m.Header.Set(HeaderCloudEventsPrefix+a.Name, outboxtype.EncodeHeaderValue(a.Value))
		}
		m.Header.Set(HeaderCloudEventsPrefix+"datacontenttype", ce.DataContentType)
		m.Data = msg.Payload
	case outbox.EnvelopeCloudEventsStructured:
		body, err := msg.StructuredCloudEvent()
		if err != nil {
			return nil, err
		}
		m.Header.Set("Content-Type", outboxtype.CloudEventsJSON)
		m.Data = body
	default:
		m.Data = msg.Payload
		for k, v := range msg.StandardHeaders() {
			if !headerName(k) {
				return nil, fmt.Errorf("header name %q: not a NATS header name (letters, digits and !#$%%&'*+-.^_`|~ only); consumers could not read the message", k)
			}
			m.Header.Set(k, v)
		}
	}
	m.Header.Set(jetstream.MsgIDHeader, msg.ID.String())
	return m, nil
}

// headerName reports whether k is a header name consumers can read back:
// an HTTP token, as NATS clients parse headers like MIME ones. The server
// stores any bytes, and a message with an empty name or a colon in one
// cannot be decoded by a consumer.
func headerName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// HeaderCloudEventsPrefix prefixes the CloudEvents attributes' headers in
// binary content mode (the NATS protocol binding): ce-id, ce-type...
const HeaderCloudEventsPrefix = "ce-"

// Publish sends msg and waits for the stream's acknowledgement.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// PublishBatch sends every message without waiting, then collects every
// acknowledgement: one pipelined round for the whole batch.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	if !p.nc.IsConnected() {
		err := outbox.Unavailable(fmt.Errorf("nats: not connected (status %s)", p.nc.Status()))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := p.ensureStream(ctx); err != nil {
		err = outbox.Unavailable(err)
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, msg := range msgs {
		if err := ctx.Err(); err != nil {
			// The relay gave up on this batch (its publish timeout): what is
			// not sent yet must not go out behind its back, after the rows
			// were released and perhaps claimed, published and marked again.
			errs[i] = fmt.Errorf("nats: not published: %w", err)
			continue
		}
		if err := validSubject(p.subject.Render(msg)); err != nil {
			errs[i] = outbox.Permanent(err)
			continue
		}
		nm, err := p.natsMsg(msg)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("nats: %w", err))
			continue
		}
		if len(nm.Data) > int(p.nc.MaxPayload()) {
			errs[i] = outbox.Permanent(fmt.Errorf("nats: payload of %d bytes exceeds the server's max_payload %d", len(nm.Data), p.nc.MaxPayload()))
			continue
		}
		f, err := p.js.PublishMsgAsync(nm, jetstream.WithStallWait(time.Until(deadline(ctx))))
		if err != nil {
			errs[i] = p.classify(err, msg)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = p.classify(err, msgs[i])
		case <-ctx.Done():
			errs[i] = fmt.Errorf("nats: waiting for PubAck: %w", ctx.Err())
		}
	}
	return errs
}

// validSubject rejects what would be published to the wrong place or refused:
// a rendered subject with an empty token (an empty event field, a stray dot),
// a wildcard token (* or >, which would be stored under a wildcard subject),
// or white space and control characters. The event's fields come from rows an
// application may have inserted by hand, so they are checked here, at publish.
func validSubject(subj string) error {
	if subj == "" {
		return errors.New("nats: empty subject")
	}
	for _, tok := range strings.Split(subj, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("nats: subject %q has an empty token (an empty event field or a stray dot)", subj)
		case tok == "*" || tok == ">":
			return fmt.Errorf("nats: subject %q has the wildcard token %q, which cannot be published to", subj, tok)
		}
		for _, r := range tok {
			if r <= ' ' || r == 0x7f {
				return fmt.Errorf("nats: subject %q contains white space or a control character", subj)
			}
		}
	}
	return nil
}

// classify classifies err, and forgets that the stream was ensured when the
// publish found none, so the next batch creates it again.
func (p *Publisher) classify(err error, msg *outbox.Message) error {
	err = classify(err, p.subject.Render(msg))
	var noStream NoStreamError
	if errors.As(err, &noStream) {
		p.ensured.Store(false)
		// Suggest what captures the template's subjects, not only this one.
		if subjects, serr := StreamSubjectsFor(p.subject.String()); serr == nil {
			noStream.capture = subjects[0]
			err = outbox.Unavailable(noStream)
		}
	}
	return err
}

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(30 * time.Second)
}

// Health reports whether the connection is up.
func (p *Publisher) Health(context.Context) error {
	if !p.nc.IsConnected() {
		return fmt.Errorf("nats: not connected (status %s)", p.nc.Status())
	}
	return nil
}
