package mqttinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/mqtt"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults for Config's zero values.
const (
	DefaultRetryBase = 250 * time.Millisecond
	DefaultRetryMax  = 30 * time.Second
)

// queueSize holds every message a session can have unacknowledged (MQTT's
// 16-bit packet ids), so paho's delivery never waits on the handler.
const queueSize = 1 << 16

// Config configures a Consumer. Zero values mean the documented defaults;
// New rejects invalid values with an *outboxtype.ConfigError naming the
// field.
type Config struct {
	// RetryBase and RetryMax space the retries of a message whose handler
	// failed: RetryBase doubling up to RetryMax, with jitter. Defaults to
	// DefaultRetryBase (250ms) and DefaultRetryMax (30s).
	RetryBase, RetryMax time.Duration
	// Logger receives a line per failed attempt and invalid message
	// (event_id, event_type, aggregate_id, attempt, topic) and per
	// connection event. Defaults to discarding them.
	Logger *slog.Logger
}

// Consumer feeds MQTT messages to an inbox.Processor and acknowledges them
// after it committed.
type Consumer struct {
	proc inbox.Processor
	cfg  Config
	log  *slog.Logger
}

// bad returns the *outboxtype.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outboxtype.ConfigError{Config: "mqttinbox.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Consumer processing messages with proc.
func New(proc inbox.Processor, cfg Config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("mqttinbox: New: processor is nil")
	}
	cfg.RetryBase = cmp.Or(cfg.RetryBase, DefaultRetryBase)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, DefaultRetryMax)
	switch {
	case cfg.RetryBase < 0:
		return nil, bad("RetryBase", "%s must be positive", cfg.RetryBase)
	case cfg.RetryBase > cfg.RetryMax:
		return nil, bad("RetryBase", "%s: must not exceed RetryMax (%s)", cfg.RetryBase, cfg.RetryMax)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{proc: proc, cfg: cfg, log: log}, nil
}

// ToMessage builds an inbox.Message from an MQTT message: the envelope's
// headers (outbox.HeaderEventID and the other standard ones) and payload
// (mqtt.OpenEnvelope). An error wraps inbox.ErrInvalidMessage.
func ToMessage(msg paho.Message) (inbox.Message, error) {
	h, payload, err := mqtt.OpenEnvelope(msg.Payload())
	if err != nil {
		// A relay with a CloudEvents envelope sends the JSON event format.
		if m, cerr := inbox.MessageFromHeaders(nil, msg.Payload()); cerr == nil {
			return m, nil
		}
		return inbox.Message{}, fmt.Errorf("mqttinbox: topic %s: %w: %w", msg.Topic(), err, inbox.ErrInvalidMessage)
	}
	return inbox.MessageFromHeaders(h, payload)
}

// Handle processes one message and acknowledges it once the processor
// succeeded (Result.Duplicate included), retrying a failed processor with
// backoff until it succeeds or ctx ends (then the message stays
// unacknowledged, for the session's next connection). A message that can
// never be processed is acknowledged without processing. It returns the
// processor's last result and error.
func (c *Consumer) Handle(ctx context.Context, msg paho.Message) (inbox.Result, error) {
	m, err := ToMessage(msg)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelError, "mqttinbox: acknowledging invalid message without processing it",
			slog.String("topic", msg.Topic()), slog.Any("err", err))
		msg.Ack()
		return inbox.Result{}, err
	}
	for attempt := 1; ; attempt++ {
		res, err := c.proc(ctx, m)
		switch {
		case err == nil:
			msg.Ack()
			return res, nil
		case errors.Is(err, inbox.ErrInvalidMessage):
			c.log.LogAttrs(ctx, slog.LevelError, "mqttinbox: acknowledging invalid message without processing it",
				append(attrs(m, msg, attempt), slog.Any("err", err))...)
			msg.Ack()
			return res, err
		case ctx.Err() != nil:
			return res, err // unacknowledged: the broker sends it again
		}
		wait := c.backoff(attempt)
		c.log.LogAttrs(ctx, slog.LevelWarn, "mqttinbox: handler failed, retrying",
			append(attrs(m, msg, attempt), slog.Duration("retry_in", wait), slog.Any("err", err))...)
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait):
		}
	}
}

// backoff is the wait after the n-th failed attempt: RetryBase·2^(n-1)
// capped at RetryMax, between half and all of it.
func (c *Consumer) backoff(n int) time.Duration {
	d := c.cfg.RetryBase
	for i := 1; i < n && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.RetryMax)
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func attrs(m inbox.Message, msg paho.Message, attempt int) []slog.Attr {
	return []slog.Attr{
		slog.String("event_id", m.ID.String()), slog.String("event_type", m.EventType),
		slog.String("aggregate_id", m.AggregateID), slog.Int("attempt", attempt), slog.String("topic", msg.Topic()),
	}
}

// Run connects with opts as a persistent session, subscribes to the topic
// filters at QoS 1 (again at every connection), and handles every message
// the session receives, one at a time, until ctx is cancelled; then it
// disconnects, leaving the session and its unacknowledged messages with the
// broker, and returns nil. opts's brokers, credentials and TLS are the
// caller's; Run overrides clean session (off), automatic PUBACK (off),
// message order (kept), the default publish handler and the connect
// handler, and reconnects by itself. opts must name a client id: it names
// the session.
func (c *Consumer) Run(ctx context.Context, opts *paho.ClientOptions, filters ...string) error {
	if opts == nil {
		return errors.New("mqttinbox: Run: client options are nil")
	}
	r := paho.NewOptionsReader(opts)
	if r.ClientID() == "" {
		return errors.New("mqttinbox: Run: the client options need a client id (SetClientID): it names the persistent session")
	}
	if len(filters) == 0 {
		return errors.New("mqttinbox: Run: no topic filter to subscribe to")
	}
	queue := make(chan paho.Message, queueSize)
	stopped := make(chan struct{})
	deliver := func(_ paho.Client, m paho.Message) {
		select {
		case queue <- m:
		case <-stopped:
		}
	}
	subs := make(map[string]byte, len(filters))
	for _, f := range filters {
		subs[f] = 1
	}
	o := *opts
	o.SetCleanSession(false)
	o.SetAutoAckDisabled(true)
	o.SetOrderMatters(true)
	o.SetAutoReconnect(true)
	o.SetConnectRetry(true)
	if r.MaxReconnectInterval() > 5*time.Second || r.MaxReconnectInterval() == 0 {
		o.SetMaxReconnectInterval(5 * time.Second)
	}
	o.SetDefaultPublishHandler(deliver)
	subscribed := make(chan error, 1)
	o.SetOnConnectHandler(func(cl paho.Client) {
		// Not in the handler's goroutine: paho must keep reading meanwhile.
		go func() {
			t := cl.SubscribeMultiple(subs, deliver)
			t.Wait()
			if err := t.Error(); err != nil {
				c.log.Error("mqttinbox: subscribe failed", "filters", filters, "err", err)
			} else {
				c.log.Info("mqttinbox: subscribed", "filters", filters, "client_id", r.ClientID())
			}
			select {
			case subscribed <- t.Error():
			default:
			}
		}()
	})
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		c.log.Warn("mqttinbox: connection lost, reconnecting", "err", err)
	})
	client := paho.NewClient(&o)
	t := client.Connect() // retries in the background until connected
	defer func() {
		close(stopped)
		client.Disconnect(250)
	}()
	select {
	case <-t.Done():
		if err := t.Error(); err != nil {
			return fmt.Errorf("mqttinbox: connect: %w", err)
		}
	case <-ctx.Done():
		return nil
	}
	for {
		select {
		case m := <-queue:
			_, _ = c.Handle(ctx, m) // logged; settled with the broker
		case err := <-subscribed:
			if err != nil {
				return fmt.Errorf("mqttinbox: subscribe to %v: %w", filters, err)
			}
		case <-ctx.Done():
			return nil
		}
	}
}
