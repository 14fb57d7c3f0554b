package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Stream entry field names (defined in outboxtype, which consumers read).
// Headers (the standard outbox-* headers and the event's own) follow as one
// field each, named HeaderPrefix + header name.
const (
	FieldID            = outboxtype.RedisFieldID
	FieldEventType     = outboxtype.RedisFieldEventType
	FieldAggregateType = outboxtype.RedisFieldAggregateType
	FieldAggregateID   = outboxtype.RedisFieldAggregateID
	FieldCreatedAt     = outboxtype.RedisFieldCreatedAt // RFC 3339 with nanoseconds, UTC
	FieldPayload       = outboxtype.RedisFieldPayload
	HeaderPrefix       = outboxtype.RedisHeaderPrefix
)

// Stream entry field names with a CloudEvents envelope, which has no Redis
// binding: the NATS binding's rules, with fields for headers. Binary
// content mode: one FieldCloudEventsPrefix field per attribute
// (ce-specversion, ce-id, ce-source, ce-type, ce-subject, ce-time,
// ce-datacontenttype, ce-<extension>), values percent-encoded as that
// binding asks, and the payload in FieldPayload. Structured mode:
// FieldContentType = application/cloudevents+json and the JSON event
// format in FieldPayload.
const (
	FieldCloudEventsPrefix = outboxtype.RedisFieldCloudEventsPrefix
	FieldContentType       = outboxtype.RedisFieldContentType
)

// Defaults for Config's zero values.
const (
	// DefaultMaxValueSize is Redis's default proto-max-bulk-len (512 MiB).
	DefaultMaxValueSize = 512 << 20
	// DefaultWaitTimeout bounds WAIT when Config.WaitReplicas is set.
	DefaultWaitTimeout = time.Second
)

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Stream is a topic template (outbox.ParseTopicTemplate) naming each
	// message's stream. Defaults to outbox.DefaultTopicTemplate
	// ("{event_type}").
	Stream string
	// MaxLen, when positive, trims each stream to about this many entries on
	// every XADD (MAXLEN ~): Redis trims whole internal nodes, so a stream
	// may hold up to stream-node-max-entries (default 100) more. Trimmed
	// entries are gone for consumers that had not read them yet. Defaults
	// to 0: no trimming.
	MaxLen int64
	// MaxValueSize is the largest payload Redis accepts, its
	// proto-max-bulk-len. A larger message fails permanently before it is
	// sent. Defaults to DefaultMaxValueSize (512 MiB), Redis's default.
	MaxValueSize int
	// RequireStream makes a missing stream a failure (ErrNoStream) instead
	// of creating it (XADD NOMKSTREAM), for deployments where operators
	// create streams and consumer groups up front.
	RequireStream bool
	// WaitReplicas, when positive, sends WAIT after each batch, in the same
	// round trip, and fails the batch's entries with ErrNotReplicated unless
	// that many replicas acknowledged them within WaitTimeout. It narrows
	// the failover window described in the package doc; it does not make
	// Redis fsync. Not supported with a cluster client.
	WaitReplicas int
	// WaitTimeout bounds WAIT (WaitReplicas). Defaults to DefaultWaitTimeout
	// (1s).
	WaitTimeout time.Duration
}

// Publisher is an outbox.Publisher, outbox.BatchPublisher and
// outbox.HealthChecker for Redis Streams. It is safe for concurrent use.
type Publisher struct {
	client goredis.UniversalClient
	owned  bool // created by NewFromURL: Close closes it
	stream *outbox.TopicTemplate
	cfg    Config
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// New returns a Publisher over client, which the caller owns (and closes).
// It does not talk to Redis.
func New(client goredis.UniversalClient, cfg Config) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("redis: client is nil")
	}
	stream, err := outbox.ParseTopicTemplate(cfg.Stream)
	if err != nil {
		return nil, bad("Stream", "%w", err)
	}
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, DefaultMaxValueSize)
	if cfg.WaitReplicas > 0 { // WaitTimeout stays 0 when WAIT is not sent
		cfg.WaitTimeout = cmp.Or(cfg.WaitTimeout, DefaultWaitTimeout)
	}
	_, cluster := client.(*goredis.ClusterClient)
	switch {
	case cfg.MaxLen < 0:
		return nil, bad("MaxLen", "%d must not be negative", cfg.MaxLen)
	case cfg.MaxValueSize < 0:
		return nil, bad("MaxValueSize", "%d must be positive", cfg.MaxValueSize)
	case cfg.WaitReplicas < 0:
		return nil, bad("WaitReplicas", "%d must not be negative", cfg.WaitReplicas)
	case cfg.WaitTimeout < 0 || (cfg.WaitReplicas > 0 && cfg.WaitTimeout < time.Millisecond):
		return nil, bad("WaitTimeout", "%s must be at least 1ms", cfg.WaitTimeout)
	case cfg.WaitReplicas > 0 && cluster:
		return nil, bad("WaitReplicas", "not supported with a cluster client")
	}
	return &Publisher{client: client, stream: stream, cfg: cfg}, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "redis.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// Stream returns the stream msg is added to.
func (p *Publisher) Stream(msg *outbox.Message) string { return p.stream.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "redis" }

// Destination implements outbox.Describer: the stream.
func (p *Publisher) Destination(msg *outbox.Message) string { return p.stream.Render(msg) }

// Values returns msg's stream entry as XADD field-value pairs, in
// msg.Envelope: the fields above, or a CloudEvent's (FieldCloudEventsPrefix).
// An error is about the message (no CloudEvent can carry it): permanent.
func Values(msg *outbox.Message) ([]any, error) {
	switch msg.Envelope {
	case outbox.EnvelopeCloudEvents:
		ce, err := msg.CloudEvent()
		if err != nil {
			return nil, err
		}
		attrs := ce.Attributes()
		v := make([]any, 0, 2*len(attrs)+4)
		for _, a := range attrs {
			v = append(v, FieldCloudEventsPrefix+a.Name, outboxtype.EncodeHeaderValue(a.Value))
		}
		return append(v, FieldCloudEventsPrefix+"datacontenttype", ce.DataContentType, FieldPayload, msg.Payload), nil
	case outbox.EnvelopeCloudEventsStructured:
		body, err := msg.StructuredCloudEvent()
		if err != nil {
			return nil, err
		}
		return []any{FieldContentType, outboxtype.CloudEventsJSON, FieldPayload, body}, nil
	}
	h := msg.StandardHeaders()
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	v := make([]any, 0, 12+2*len(keys))
	v = append(v,
		FieldID, msg.ID.String(),
		FieldEventType, msg.EventType,
		FieldAggregateType, msg.AggregateType,
		FieldAggregateID, msg.AggregateID,
		FieldCreatedAt, msg.CreatedAt.UTC().Format(time.RFC3339Nano),
		FieldPayload, msg.Payload,
	)
	for _, k := range keys {
		v = append(v, HeaderPrefix+k, h[k])
	}
	return v, nil
}

// payloadSize is the length of FieldPayload's value among XADD values.
func payloadSize(values []any) int {
	for i := 0; i+1 < len(values); i += 2 {
		if values[i] == FieldPayload {
			b, _ := values[i+1].([]byte)
			return len(b)
		}
	}
	return 0
}

// Publish adds msg to its stream.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// PublishBatch adds every message with one pipelined round trip (XADD per
// message, then WAIT if configured) and returns each message's result:
//
//   - nil: Redis added the entry (see the package doc for what that is
//     worth) and, with WaitReplicas, enough replicas acknowledged it.
//   - permanent: a payload over MaxValueSize, or an error reply that
//     retrying cannot fix (WRONGTYPE: the key is not a stream; other ERR
//     replies).
//   - unavailable: no connection (refused, reset, closed, timed out), or
//     Redis refuses every write for now (LOADING, BUSY, OOM, READONLY,
//     MASTERDOWN, CLUSTERDOWN, TRYAGAIN, NOAUTH, WRONGPASS, NOPERM, max
//     clients), or ErrNoStream (RequireStream and no such stream).
//   - ErrNotReplicated: transient.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	pipe := p.client.Pipeline()
	cmds := make([]*goredis.StringCmd, len(msgs))
	for i, m := range msgs {
		values, err := Values(m)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("redis: %w", err))
			continue
		}
		if n := payloadSize(values); n > p.cfg.MaxValueSize {
			errs[i] = outbox.Permanent(fmt.Errorf("redis: payload of %d bytes exceeds MaxValueSize %d", n, p.cfg.MaxValueSize))
			continue
		}
		cmds[i] = pipe.XAdd(ctx, &goredis.XAddArgs{
			Stream:     p.stream.Render(m),
			NoMkStream: p.cfg.RequireStream,
			MaxLen:     p.cfg.MaxLen,
			Approx:     p.cfg.MaxLen > 0,
			Values:     values,
		})
	}
	if pipe.Len() == 0 {
		return errs
	}
	var wait *goredis.Cmd
	if p.cfg.WaitReplicas > 0 {
		wait = pipe.Do(ctx, "WAIT", p.cfg.WaitReplicas, p.cfg.WaitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // every command carries its own result
	var waitErr error
	if wait != nil {
		switch n, err := wait.Int64(); {
		case err != nil:
			waitErr = classify(fmt.Errorf("WAIT: %w", err), "")
		case n < int64(p.cfg.WaitReplicas):
			waitErr = fmt.Errorf("%w: %d of %d within %s", ErrNotReplicated, n, p.cfg.WaitReplicas, p.cfg.WaitTimeout)
		}
	}
	for i, c := range cmds {
		if c == nil {
			continue
		}
		errs[i] = classify(c.Err(), p.stream.Render(msgs[i]))
		if errs[i] == nil {
			errs[i] = waitErr
		}
	}
	return errs
}

// Health pings Redis.
func (p *Publisher) Health(ctx context.Context) error {
	if err := p.client.Ping(ctx).Err(); err != nil {
		return classify(fmt.Errorf("PING: %w", err), "")
	}
	return nil
}

// Close closes the client if NewFromURL created it; a client given to New
// is the caller's to close.
func (p *Publisher) Close() error {
	if !p.owned {
		return nil
	}
	return p.client.Close()
}
