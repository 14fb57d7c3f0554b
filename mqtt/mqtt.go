package mqtt

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox"
)

// Defaults for Config's zero values, and MQTT's limits.
const (
	// MaxPacketBytes is the largest packet MQTT can carry (256 MB).
	MaxPacketBytes = 268435455
	// DefaultMaxMessageBytes is MaxPacketBytes: set MaxMessageBytes to the
	// broker's own limit (Mosquitto's max_packet_size).
	DefaultMaxMessageBytes = MaxPacketBytes
	// DefaultWriteTimeout bounds handing one message to the connection.
	DefaultWriteTimeout = 5 * time.Second
	// DefaultConnectTimeout bounds one connection attempt.
	DefaultConnectTimeout = 10 * time.Second
	// maxReconnectDelay caps the wait between connection attempts.
	maxReconnectDelay = 5 * time.Second
)

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Topic is a topic template (outbox.ParseTopicTemplate) giving each
	// message's topic: "orders/{event_type}", "{aggregate_type}/events".
	// A rendered topic MQTT cannot publish to (empty, a + or # wildcard, a
	// NUL character, starting with the broker's reserved $) fails
	// permanently before anything is sent. Defaults to
	// outbox.DefaultTopicTemplate ("{event_type}").
	Topic string
	// MaxMessageBytes is the largest PUBLISH packet sent (topic, packet id
	// and envelope); a larger message fails permanently without being sent.
	// Set it to the broker's limit (Mosquitto's max_packet_size, or
	// message_size_limit plus the topic): a broker closes the connection of
	// a client sending more, which would look like an outage. Defaults to
	// DefaultMaxMessageBytes (268,435,455), MQTT's own limit.
	MaxMessageBytes int
	// Logger receives connection events (connected, lost, why an attempt
	// failed). Defaults to discarding them.
	Logger *slog.Logger
}

// Publisher is an outbox.BatchPublisher and outbox.HealthChecker for an MQTT
// 3.1.1 broker. It is safe for concurrent use.
type Publisher struct {
	client   paho.Client
	topic    *outbox.TopicTemplate
	maxBytes int
	log      *slog.Logger
	broker   string // for the log

	lost      chan struct{} // the connection was lost: connect again
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "mqtt.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Publisher with a client of its own made
// from opts (brokers, credentials, TLS, client id: the caller's), which it
// connects in the background, and again whenever the connection is lost. It
// does not wait for the broker: until connected, publishes fail as
// unavailable. Close disconnects.
//
// New overrides what the outbox's contract needs: a clean session,
// AutoReconnect and ConnectRetry off (the publisher reconnects itself:
// paho's own reconnection completes the tokens of messages it sends again
// as if they were acknowledged, which would mark an event published before
// the broker confirmed it), and the connection handlers. opts's client id
// defaults to "pgoutbox-" and random characters: two relays sharing one id
// would take the connection from each other.
func New(opts *paho.ClientOptions, cfg Config) (*Publisher, error) {
	if opts == nil {
		return nil, errors.New("mqtt: client options are nil")
	}
	r := paho.NewOptionsReader(opts)
	if len(r.Servers()) == 0 {
		return nil, errors.New("mqtt: client options name no broker (ClientOptions.AddBroker)")
	}
	topic, err := outbox.ParseTopicTemplate(cfg.Topic)
	if err != nil {
		return nil, bad("Topic", "%w", err)
	}
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	if cfg.MaxMessageBytes < 1024 || cfg.MaxMessageBytes > MaxPacketBytes {
		return nil, bad("MaxMessageBytes", "%d: must be between 1024 and %d", cfg.MaxMessageBytes, MaxPacketBytes)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	p := &Publisher{topic: topic, maxBytes: cfg.MaxMessageBytes, log: log, broker: r.Servers()[0].Redacted(),
		lost: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}

	o := *opts // a copy: the caller's options stay as they were
	if r.ClientID() == "" {
		o.SetClientID("pgoutbox-" + randomHex(8))
	}
	if r.WriteTimeout() == 0 {
		o.SetWriteTimeout(DefaultWriteTimeout)
	}
	if r.ConnectTimeout() == 0 {
		o.SetConnectTimeout(DefaultConnectTimeout)
	}
	o.SetCleanSession(true)
	o.SetAutoReconnect(false)
	o.SetConnectRetry(false)
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		p.log.Warn("mqtt connection lost", "broker", p.broker, "err", err)
		select {
		case p.lost <- struct{}{}:
		default:
		}
	})
	o.SetOnConnectHandler(func(paho.Client) { p.log.Info("mqtt connected", "broker", p.broker) })
	p.client = paho.NewClient(&o)
	go p.maintain()
	return p, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maintain connects, and connects again after a loss, with a backoff from
// 100ms to 5s between failed attempts, until Close.
func (p *Publisher) maintain() {
	defer close(p.done)
	delay, lastReason := 100*time.Millisecond, ""
	for {
		if !p.client.IsConnectionOpen() {
			t := p.client.Connect()
			select {
			case <-t.Done():
			case <-p.stop:
				return
			}
			if err := t.Error(); err != nil {
				if reason := err.Error(); reason != lastReason {
					lastReason = reason
					p.log.Warn("mqtt connection attempt failed", "broker", p.broker, "err", reason)
				}
				select {
				case <-time.After(delay):
				case <-p.stop:
					return
				}
				delay = min(2*delay, maxReconnectDelay)
				continue
			}
			delay, lastReason = 100*time.Millisecond, ""
		}
		select {
		case <-p.lost:
		case <-p.stop:
			return
		}
	}
}

// Close stops reconnecting and disconnects, giving messages in flight a
// quarter of a second.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		close(p.stop)
		<-p.done
		p.client.Disconnect(250)
	})
	return nil
}

// Health reports whether the connection is up.
func (p *Publisher) Health(context.Context) error {
	if !p.client.IsConnectionOpen() {
		return fmt.Errorf("mqtt: not connected to %s", p.broker)
	}
	return nil
}

// Topic returns the topic msg is published to.
func (p *Publisher) Topic(msg *outbox.Message) string { return p.topic.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "mqtt" }

// Destination implements outbox.Describer: the topic.
func (p *Publisher) Destination(msg *outbox.Message) string { return p.topic.Render(msg) }

// validTopic rejects a topic name MQTT cannot publish to.
func validTopic(t string) error {
	switch {
	case t == "":
		return errors.New("empty topic")
	case len(t) > 65535:
		return fmt.Errorf("topic of %d bytes; MQTT allows 65535", len(t))
	case !utf8.ValidString(t):
		return errors.New("topic is not valid UTF-8")
	case strings.ContainsAny(t, "+#"):
		return fmt.Errorf("topic %q has a wildcard (+ or #), which cannot be published to", t)
	case strings.ContainsRune(t, 0):
		return fmt.Errorf("topic %q has a NUL character", t)
	case strings.HasPrefix(t, "$"):
		return fmt.Errorf("topic %q starts with $, reserved for the broker", t)
	}
	return nil
}

// Publish sends msg at QoS 1 and waits for the broker's PUBACK.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// PublishBatch sends every message at QoS 1 without waiting, then collects
// every PUBACK: one pipelined round for the whole batch, one result per
// message. Messages go out on one connection in the batch's order, so one
// aggregate's events reach the broker in order.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	tokens := make([]paho.Token, len(msgs))
	var stuck error // a message could not be handed to the connection
	for i, msg := range msgs {
		if err := ctx.Err(); err != nil {
			// The relay gave up on this batch: what is not sent yet must not
			// go out behind its back.
			errs[i] = fmt.Errorf("mqtt: not published: %w", err)
			continue
		}
		topic := p.topic.Render(msg)
		if err := validTopic(topic); err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("mqtt: topic from template %q: %w", p.topic, err))
			continue
		}
		payload, err := Payload(msg)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("mqtt: %s: %w", topic, err))
			continue
		}
		// A PUBLISH packet: fixed header (up to 5 bytes), topic length and
		// topic, packet id, payload.
		if n := 5 + 2 + len(topic) + 2 + len(payload); n > p.maxBytes {
			errs[i] = outbox.Permanent(fmt.Errorf("mqtt: %s: a message of %d bytes (envelope and topic) exceeds MaxMessageBytes %d", topic, n, p.maxBytes))
			continue
		}
		if stuck != nil {
			errs[i] = stuck
			continue
		}
		if !p.client.IsConnectionOpen() {
			errs[i] = outbox.Unavailable(fmt.Errorf("mqtt: not connected to %s", p.broker))
			continue
		}
		t := p.client.Publish(topic, 1, false, payload)
		select {
		case <-t.Done():
			// Failed at once (not connected, or the connection did not take
			// the message within WriteTimeout): the next ones would wait as
			// long, so they are not sent.
			if err := t.Error(); err != nil {
				errs[i] = classify(err, p.broker)
				stuck = errs[i]
				continue
			}
		default:
		}
		tokens[i] = t
	}
	for i, t := range tokens {
		if t == nil {
			continue
		}
		select {
		case <-t.Done():
			if err := t.Error(); err != nil {
				errs[i] = classify(err, p.broker)
			}
		case <-ctx.Done():
			errs[i] = fmt.Errorf("mqtt: waiting for PUBACK: %w", ctx.Err())
		}
	}
	return outbox.ClassifyBatch(errs, nil)
}
