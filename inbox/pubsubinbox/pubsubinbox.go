package pubsubinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// DefaultAckTimeout is Config.AckTimeout's default.
const DefaultAckTimeout = 10 * time.Second

// Config configures a Consumer. Zero values mean the documented defaults;
// New rejects invalid values with an *outboxtype.ConfigError naming the
// field.
type Config struct {
	// AckTimeout bounds the wait for an Ack's answer (exactly-once
	// subscriptions answer once the Ack is durable; others at once).
	// Defaults to DefaultAckTimeout (10s).
	AckTimeout time.Duration
	// Logger receives a line per failed, invalid or unacknowledged message
	// (event_id, event_type, aggregate_id, attempt, message_id). Defaults to
	// discarding them.
	Logger *slog.Logger
}

// Consumer feeds Pub/Sub messages to an inbox.Processor and acknowledges them
// after it committed. It is safe for concurrent use.
type Consumer struct {
	proc inbox.Processor
	cfg  Config
	log  *slog.Logger
}

// bad returns the *outboxtype.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outboxtype.ConfigError{Config: "pubsubinbox.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Consumer processing messages with proc.
func New(proc inbox.Processor, cfg Config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("pubsubinbox: New: processor is nil")
	}
	cfg.AckTimeout = cmp.Or(cfg.AckTimeout, DefaultAckTimeout)
	if cfg.AckTimeout < 0 {
		return nil, bad("AckTimeout", "%s must be positive", cfg.AckTimeout)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{proc: proc, cfg: cfg, log: log}, nil
}

// ToMessage builds an inbox.Message from a Pub/Sub message's attributes
// (outbox.HeaderEventID and the other standard headers, as the pubsub
// publisher sets them) and data. An error wraps inbox.ErrInvalidMessage.
func ToMessage(msg *gpubsub.Message) (inbox.Message, error) {
	h := make(map[string]string, len(msg.Attributes))
	for k, v := range msg.Attributes {
		if len(k) > 3 && strings.EqualFold(k[:3], "ce-") {
			// The Pub/Sub binding sends ce- values as they are, where HTTP
			// and NATS percent-encode them, as MessageFromHeaders expects.
			v = strings.NewReplacer("%", "%25", `"`, "%22").Replace(v)
		}
		h[k] = v
	}
	return inbox.MessageFromHeaders(h, msg.Data)
}

// Handle processes one message and settles it with Pub/Sub: Ack after the
// processor succeeded (Result.Duplicate included), Nack after it failed, Ack
// without processing for a message that can never be processed. It returns
// the processor's result and error; a failed Ack is returned too (the
// effects are committed and the redelivery will be a duplicate).
func (c *Consumer) Handle(ctx context.Context, msg *gpubsub.Message) (inbox.Result, error) {
	m, err := ToMessage(msg)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelError, "pubsubinbox: acknowledging invalid message without processing it",
			slog.String("message_id", msg.ID), slog.Any("err", err))
		msg.Ack()
		return inbox.Result{}, err
	}
	res, err := c.proc(ctx, m)
	if err != nil {
		if errors.Is(err, inbox.ErrInvalidMessage) {
			c.log.LogAttrs(ctx, slog.LevelError, "pubsubinbox: acknowledging invalid message without processing it",
				append(attrs(m, msg), slog.Any("err", err))...)
			msg.Ack()
			return res, err
		}
		c.log.LogAttrs(ctx, slog.LevelWarn, "pubsubinbox: handler failed, message will be redelivered",
			append(attrs(m, msg), slog.Any("err", err))...)
		msg.Nack()
		return res, err
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.AckTimeout)
	defer cancel()
	status, ackErr := msg.AckWithResult().Get(actx)
	if ackErr == nil && status != gpubsub.AcknowledgeStatusSuccess {
		ackErr = fmt.Errorf("acknowledge status %d", status)
	}
	if ackErr != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "pubsubinbox: ack failed after commit; the redelivery will be skipped as a duplicate",
			append(attrs(m, msg), slog.Any("err", ackErr))...)
		return res, fmt.Errorf("pubsubinbox: event %s committed, ack failed: %w", m.ID, ackErr)
	}
	return res, nil
}

func attrs(m inbox.Message, msg *gpubsub.Message) []slog.Attr {
	a := []slog.Attr{
		slog.String("event_id", m.ID.String()), slog.String("event_type", m.EventType),
		slog.String("aggregate_id", m.AggregateID), slog.String("message_id", msg.ID),
	}
	if msg.DeliveryAttempt != nil {
		a = append(a, slog.Int("attempt", *msg.DeliveryAttempt))
	}
	return a
}

// Run receives messages from sub and handles each until ctx is cancelled,
// then returns nil once the messages in flight are settled. A message in
// flight when ctx is cancelled sees its transaction rolled back and is
// Nacked. Run returns the error that ends Receive otherwise (a subscription
// that does not exist, permissions).
func (c *Consumer) Run(ctx context.Context, sub *gpubsub.Subscriber) error {
	if sub == nil {
		return errors.New("pubsubinbox: Run: subscriber is nil")
	}
	err := sub.Receive(ctx, func(ctx context.Context, msg *gpubsub.Message) {
		_, _ = c.Handle(ctx, msg) // logged; settled with Pub/Sub
	})
	if err != nil {
		return fmt.Errorf("pubsubinbox: receive from %s: %w", sub, err)
	}
	return nil
}
