package rabbitmqinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// DefaultWorkers is Config.Workers's default.
const DefaultWorkers = 1

// Config configures a Consumer. Zero values mean the documented defaults;
// New rejects invalid values with an *outboxtype.ConfigError naming the
// field.
type Config struct {
	// Prefetch is the channel's basic.qos prefetch count set by Run: how many
	// unacknowledged deliveries the broker sends ahead. Defaults to twice
	// Workers.
	Prefetch int
	// Workers is how many deliveries Run processes concurrently. Defaults
	// to DefaultWorkers (1).
	Workers int
	// RequeueDelay is how long a worker waits before nacking a failed
	// delivery, so a failing handler does not spin through redeliveries
	// (RabbitMQ requeues at once). The delivery stays unacknowledged
	// meanwhile. Defaults to 0: a nack at once.
	RequeueDelay time.Duration
	// ConsumerTag names the consumer on the broker. Defaults to a unique
	// tag amqp091-go generates.
	ConsumerTag string
	// Logger receives a line per failed or rejected delivery and per failed
	// acknowledgement (event_id, event_type, aggregate_id, redelivered).
	// Defaults to discarding them.
	Logger *slog.Logger
}

// Consumer feeds RabbitMQ deliveries to an inbox.Processor and acknowledges
// them after it committed. It is safe for concurrent use.
type Consumer struct {
	proc inbox.Processor
	cfg  Config
	log  *slog.Logger
}

// bad returns the *outboxtype.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outboxtype.ConfigError{Config: "rabbitmqinbox.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Consumer processing deliveries with proc.
func New(proc inbox.Processor, cfg Config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("rabbitmqinbox: New: processor is nil")
	}
	cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
	switch {
	case cfg.Workers < 1 || cfg.Workers > 1024:
		return nil, bad("Workers", "%d must be between 1 and 1024", cfg.Workers)
	case cfg.Prefetch < 0 || cfg.Prefetch > 65535:
		return nil, bad("Prefetch", "%d must be between 0 and 65535", cfg.Prefetch)
	case cfg.RequeueDelay < 0:
		return nil, bad("RequeueDelay", "%s must not be negative", cfg.RequeueDelay)
	}
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 2*cfg.Workers)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{proc: proc, cfg: cfg, log: log}, nil
}

// ToMessage builds an inbox.Message from a delivery's headers (string values;
// others are formatted), body and properties. An error wraps
// inbox.ErrInvalidMessage.
func ToMessage(d amqp.Delivery) (inbox.Message, error) {
	h := make(map[string]string, len(d.Headers)+1)
	for k, v := range d.Headers {
		switch v := v.(type) {
		case string:
			h[k] = v
		case []byte:
			h[k] = string(v)
		default:
			h[k] = fmt.Sprint(v)
		}
	}
	if _, ok := h[outboxtype.HeaderEventID]; !ok && d.MessageId != "" {
		h[outboxtype.HeaderEventID] = d.MessageId
	}
	if _, ok := h[outboxtype.HeaderEventType]; !ok && d.Type != "" {
		h[outboxtype.HeaderEventType] = d.Type
	}
	if _, ok := h["content-type"]; !ok && d.ContentType != "" {
		h["content-type"] = d.ContentType // a structured CloudEvent says so here
	}
	return inbox.MessageFromHeaders(h, d.Body)
}

// Handle processes one delivery and settles it: ack after the processor
// succeeded (Result.Duplicate included), nack with requeue after it failed,
// reject without requeue for a delivery that can never be processed. It
// returns the processor's result and error; a failed ack is returned too (the
// effects are committed and the redelivery will be a duplicate).
func (c *Consumer) Handle(ctx context.Context, d amqp.Delivery) (inbox.Result, error) {
	m, err := ToMessage(d)
	if err == nil {
		var res inbox.Result
		res, err = c.proc(ctx, m)
		if err == nil {
			if ackErr := d.Ack(false); ackErr != nil {
				c.log.LogAttrs(ctx, slog.LevelWarn, "rabbitmqinbox: ack failed after commit; the redelivery will be skipped as a duplicate",
					append(attrs(m, d), slog.Any("err", ackErr))...)
				return res, fmt.Errorf("rabbitmqinbox: event %s committed, ack failed: %w", m.ID, ackErr)
			}
			return res, nil
		}
	}
	if errors.Is(err, inbox.ErrInvalidMessage) {
		c.log.LogAttrs(ctx, slog.LevelError, "rabbitmqinbox: rejecting invalid delivery",
			slog.String("routing_key", d.RoutingKey), slog.String("message_id", d.MessageId), slog.Any("err", err))
		if rejErr := d.Reject(false); rejErr != nil {
			return inbox.Result{}, errors.Join(err, fmt.Errorf("rabbitmqinbox: reject: %w", rejErr))
		}
		return inbox.Result{}, err
	}
	c.log.LogAttrs(ctx, slog.LevelWarn, "rabbitmqinbox: handler failed, delivery requeued",
		append(attrs(m, d), slog.Any("err", err))...)
	if c.cfg.RequeueDelay > 0 {
		t := time.NewTimer(c.cfg.RequeueDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if nackErr := d.Nack(false, true); nackErr != nil {
		// The channel is gone; the broker requeues unacknowledged deliveries.
		return inbox.Result{}, errors.Join(err, fmt.Errorf("rabbitmqinbox: nack: %w", nackErr))
	}
	return inbox.Result{}, err
}

func attrs(m inbox.Message, d amqp.Delivery) []slog.Attr {
	return []slog.Attr{
		slog.String("event_id", m.ID.String()), slog.String("event_type", m.EventType),
		slog.String("aggregate_id", m.AggregateID), slog.Bool("redelivered", d.Redelivered),
	}
}

// ErrChannelClosed is returned by Run when the channel or its connection
// closed before ctx was cancelled; open a new channel and call Run again.
var ErrChannelClosed = errors.New("rabbitmqinbox: channel closed")

// Run sets the channel's prefetch, consumes queue with manual
// acknowledgements and handles each delivery until ctx is cancelled (it then
// cancels the consumer, finishes the deliveries in hand and returns nil) or
// the channel closes (it returns an error wrapping ErrChannelClosed).
// Deliveries received but not handled are requeued by the broker when the
// channel closes. ch is the caller's: Run does not close it.
func (c *Consumer) Run(ctx context.Context, ch *amqp.Channel, queue string) error {
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("rabbitmqinbox: qos: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, c.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmqinbox: consume %q: %w", queue, err)
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range deliveries {
				if ctx.Err() != nil {
					_ = d.Nack(false, true) // stopping: hand it back unprocessed
					continue
				}
				_, _ = c.Handle(ctx, d) // logged; settled with the broker
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%w while consuming %q", ErrChannelClosed, queue)
}
