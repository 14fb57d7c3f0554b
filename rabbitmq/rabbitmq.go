package rabbitmq

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults for Config's zero values.
const (
	// DefaultURL is a local broker with RabbitMQ's default user.
	DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"
	// DefaultMaxMessageSize is RabbitMQ's default max_message_size (128 MiB).
	DefaultMaxMessageSize = 128 << 20
	DefaultDialTimeout    = 10 * time.Second
	DefaultHeartbeat      = 10 * time.Second
	DefaultConnectionName = "pgoutbox"
	// maxShortString is AMQP's limit on exchange names and routing keys.
	maxShortString = 255
)

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// URL is the broker's AMQP URI, amqp:// or amqps://, with credentials and
	// vhost (see amqp091.ParseURI: heartbeat, connection_timeout and TLS
	// query options are honoured). Its password never appears in errors or
	// logs. Defaults to DefaultURL ("amqp://guest:guest@127.0.0.1:5672/").
	URL string
	// Exchange receives every message. "" (the default) is the default
	// exchange, which routes to the queue named by the routing key.
	Exchange string
	// RoutingKey is a topic template (outbox.ParseTopicTemplate) giving each
	// message's routing key. Defaults to outbox.DefaultTopicTemplate
	// ("{event_type}").
	RoutingKey string
	// DeclareExchange, when set, is the kind ("topic", "direct", "fanout",
	// "headers") of a durable Exchange the publisher declares on every
	// connection. Empty (the default): the publisher declares nothing;
	// creating exchanges, queues and bindings is the operator's job.
	DeclareExchange string
	// MaxMessageSize is the largest body the broker accepts, its
	// max_message_size. A larger message fails with a permanent error before
	// it is sent. Defaults to DefaultMaxMessageSize (128 MiB), RabbitMQ's
	// default.
	MaxMessageSize int
	// DialTimeout bounds connecting (TCP, TLS and the AMQP handshake), within
	// the publish's context. Defaults to DefaultDialTimeout (10s).
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval; a connection silent for three
	// intervals is considered dead. A heartbeat in URL wins. Defaults to
	// DefaultHeartbeat (10s).
	Heartbeat time.Duration
	// TLS configures amqps:// connections; nil uses the URL's options.
	TLS *tls.Config
	// ConnectionName is shown in RabbitMQ's management UI. Defaults to
	// DefaultConnectionName ("pgoutbox").
	ConnectionName string
	// Logger receives reconnect and channel-close logs. Defaults to
	// discarding them.
	Logger *slog.Logger
}

// Publisher is an outbox.Publisher, outbox.BatchPublisher and
// outbox.HealthChecker for RabbitMQ. It is safe for concurrent use.
//
// It connects on first use and again whenever the connection or channel has
// closed. All publishes share one channel in confirm mode; a message counts
// as published only when the broker acks it.
type Publisher struct {
	cfg      Config
	url      string // with credentials, for dialling only
	redacted string // for errors and logs
	key      *outbox.TopicTemplate
	log      *slog.Logger

	connect chan struct{} // one slot: one (re)connect at a time, ctx-aware

	mu     sync.Mutex
	cur    *session
	closed bool
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// New validates cfg and returns a Publisher. It does not connect: the first
// Publish or Health does. Call Health to fail fast on a wrong URL.
func New(cfg Config) (*Publisher, error) {
	cfg.URL = cmp.Or(cfg.URL, DefaultURL)
	redacted, err := checkURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	key, err := outbox.ParseTopicTemplate(cfg.RoutingKey)
	if err != nil {
		return nil, bad("RoutingKey", "%w", err)
	}
	cfg.MaxMessageSize = cmp.Or(cfg.MaxMessageSize, DefaultMaxMessageSize)
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, DefaultDialTimeout)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, DefaultHeartbeat)
	cfg.ConnectionName = cmp.Or(cfg.ConnectionName, DefaultConnectionName)
	switch {
	case len(cfg.Exchange) > maxShortString:
		return nil, bad("Exchange", "%d bytes, AMQP allows %d", len(cfg.Exchange), maxShortString)
	case cfg.DeclareExchange != "" && !slices.Contains([]string{"topic", "direct", "fanout", "headers"}, cfg.DeclareExchange):
		return nil, bad("DeclareExchange", "%q: want topic, direct, fanout or headers", cfg.DeclareExchange)
	case cfg.DeclareExchange != "" && cfg.Exchange == "":
		return nil, bad("DeclareExchange", "set, but Config.Exchange is the default exchange, which cannot be declared")
	case cfg.MaxMessageSize < 0:
		return nil, bad("MaxMessageSize", "%d must be positive", cfg.MaxMessageSize)
	case cfg.DialTimeout < 0:
		return nil, bad("DialTimeout", "%s must be positive", cfg.DialTimeout)
	case cfg.Heartbeat < time.Second:
		return nil, bad("Heartbeat", "%s: must be at least 1s (AMQP counts in seconds)", cfg.Heartbeat)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Publisher{
		cfg: cfg, url: cfg.URL, redacted: redacted, key: key, log: log.With("broker", redacted),
		connect: make(chan struct{}, 1),
	}, nil
}

// checkURL validates u without ever echoing its password, and returns it
// redacted.
func checkURL(u string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, password included
		}
		return "", bad("URL", "%w", err)
	}
	redacted := parsed.Redacted()
	if _, err := amqp.ParseURI(u); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", bad("URL", "%s: %w", redacted, err)
	}
	return redacted, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "rabbitmq.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// RoutingKey returns the routing key msg is published with.
func (p *Publisher) RoutingKey(msg *outbox.Message) string { return p.key.Render(msg) }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "rabbitmq" }

// Destination implements outbox.Describer: the exchange, or for the default
// exchange the routing key (the queue it routes to).
func (p *Publisher) Destination(msg *outbox.Message) string {
	if p.cfg.Exchange == "" {
		return p.key.Render(msg)
	}
	return p.cfg.Exchange
}

// Publish sends msg and waits for the broker's confirm.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// PublishBatch sends every message, then waits for every confirm: one
// pipelined round. Each message gets its own result:
//
//   - nil: the broker acked it (and, being mandatory, routed it to a queue).
//   - permanent: larger than MaxMessageSize, or a routing key over 255 bytes.
//   - unavailable: the connection could not be made, or closed before the
//     message was confirmed; the broker is blocking publishers (a memory or
//     disk alarm); ErrUnroutable (returned: no queue bound for its key);
//     ErrNacked (refused, e.g. a full queue with reject-publish); the
//     exchange does not exist (404) or the user may not write to it (403).
//   - ctx's error: no confirm in time; unavailable when no message of the
//     batch was confirmed (outbox.ClassifyBatch).
//
// A channel the broker closes mid-batch (an error caused by one message, such
// as a missing exchange) fails that message with the broker's error and the
// batch's other unconfirmed messages as unavailable; the next call reopens
// the channel.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	fill := func(from int, err error) {
		for i := from; i < len(msgs); i++ {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	pubs := make([]amqp.Publishing, len(msgs))
	for i, m := range msgs {
		var err error
		if pubs[i], err = Publishing(m); err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("rabbitmq: %w", err))
		} else if len(pubs[i].Body) > p.cfg.MaxMessageSize {
			errs[i] = outbox.Permanent(fmt.Errorf("rabbitmq: message of %d bytes exceeds MaxMessageSize %d", len(pubs[i].Body), p.cfg.MaxMessageSize))
		} else if k := p.key.Render(m); len(k) > maxShortString {
			errs[i] = outbox.Permanent(fmt.Errorf("rabbitmq: routing key of %d bytes exceeds AMQP's %d", len(k), maxShortString))
		}
	}
	s, err := p.session(ctx)
	if err != nil {
		fill(0, err)
		return errs
	}
	if err := s.lockPublish(ctx); err != nil {
		fill(0, fmt.Errorf("rabbitmq: waiting to publish: %w", err))
		return errs
	}
	waiters := make([]*waiter, len(msgs))
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			fill(i, fmt.Errorf("rabbitmq: publish: %w", err))
			break
		}
		w, err := s.publish(p.cfg.Exchange, p.key.Render(m), m.ID.String(), pubs[i])
		if err != nil {
			// The channel is gone: nothing after this message was sent either.
			fill(i, err)
			break
		}
		waiters[i] = w
	}
	s.unlockPublish()
	for i, w := range waiters {
		if w == nil {
			continue
		}
		select {
		case errs[i] = <-w.res:
		case <-ctx.Done():
			errs[i] = fmt.Errorf("rabbitmq: waiting for the broker's confirm: %w", ctx.Err())
		}
	}
	return outbox.ClassifyBatch(errs, nil)
}

// Health reports whether the broker is reachable: it connects if need be,
// and checks that Exchange exists (a passive declare on a separate channel).
func (p *Publisher) Health(ctx context.Context) error {
	s, err := p.session(ctx)
	if err != nil {
		return err
	}
	if reason, blocked := s.isBlocked(); blocked {
		return fmt.Errorf("rabbitmq: broker is blocking publishers: %s", reason)
	}
	if p.cfg.Exchange == "" {
		return nil
	}
	done := make(chan error, 1)
	go func() { // the AMQP calls below take no context
		ch, err := s.conn.Channel()
		if err != nil {
			done <- fmt.Errorf("rabbitmq: open channel: %w", err)
			return
		}
		defer ch.Close()
		if err := ch.ExchangeDeclarePassive(p.cfg.Exchange, "topic", true, false, false, false, nil); err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				done <- missingExchange(fmt.Errorf("rabbitmq: health check: %w", err), p.cfg.Exchange)
				return
			}
			done <- fmt.Errorf("rabbitmq: exchange %q: %w", p.cfg.Exchange, err)
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: health check: %w", ctx.Err())
	}
}

// Close closes the connection. Publishes in flight fail as unavailable, as do
// later ones. Close is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	s := p.cur
	p.cur, p.closed = nil, true
	p.mu.Unlock()
	if s != nil {
		return s.close()
	}
	return nil
}

// session returns the live session, connecting if there is none.
func (p *Publisher) session(ctx context.Context) (*session, error) {
	if s, err := p.live(); s != nil || err != nil {
		return s, err
	}
	select {
	case p.connect <- struct{}{}:
		defer func() { <-p.connect }()
	case <-ctx.Done():
		return nil, outbox.Unavailable(fmt.Errorf("rabbitmq: waiting for the connection to %s: %w", p.redacted, ctx.Err()))
	}
	if s, err := p.live(); s != nil || err != nil {
		return s, err // another caller connected meanwhile
	}
	s, err := p.dial(ctx)
	if err != nil {
		p.log.Warn("rabbitmq: connect failed", "err", err)
		return nil, outbox.Unavailable(fmt.Errorf("rabbitmq: connect to %s: %w", p.redacted, err))
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = s.close()
		return nil, outbox.Unavailable(ErrClosed)
	}
	old := p.cur
	p.cur = s
	p.mu.Unlock()
	if old != nil {
		_ = old.close()
	}
	p.log.Info("rabbitmq: connected")
	return s, nil
}

// live returns the current session if it is still usable.
func (p *Publisher) live() (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, outbox.Unavailable(ErrClosed)
	}
	if p.cur != nil && !p.cur.ended() {
		return p.cur, nil
	}
	return nil, nil
}

func (p *Publisher) dial(ctx context.Context) (*session, error) {
	dialCtx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	deadline, _ := dialCtx.Deadline()
	var tlsCfg *tls.Config
	if p.cfg.TLS != nil {
		tlsCfg = p.cfg.TLS.Clone() // amqp091 sets ServerName on it
	}
	conn, err := amqp.DialConfig(p.url, amqp.Config{
		Heartbeat:       p.cfg.Heartbeat,
		TLSClientConfig: tlsCfg,
		Properties:      amqp.Table{"connection_name": p.cfg.ConnectionName},
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(dialCtx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds TLS and the AMQP handshake; amqp091 clears it once open.
			if err := c.SetDeadline(deadline); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
	})
	if err != nil {
		return nil, err
	}
	// Channel setup takes no context: closing the connection when ctx ends
	// unblocks it.
	stop := context.AfterFunc(dialCtx, func() { _ = conn.CloseDeadline(time.Now()) })
	ch, err := conn.Channel()
	if err == nil && p.cfg.DeclareExchange != "" {
		err = ch.ExchangeDeclare(p.cfg.Exchange, p.cfg.DeclareExchange, true, false, false, false, nil)
		if err != nil {
			err = fmt.Errorf("declare exchange %q: %w", p.cfg.Exchange, err)
		}
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if !stop() { // ctx ended and closed the connection
		if err == nil {
			err = amqp.ErrClosed
		}
		return nil, fmt.Errorf("%w (%w)", dialCtx.Err(), err)
	}
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(time.Second))
		return nil, err
	}
	return newSession(conn, ch, p.log), nil
}

// session is one connection and its confirm-mode channel. A closed channel
// ends the session; the publisher then opens a new one.
type session struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	log  *slog.Logger

	pub chan struct{} // one slot: delivery tags are assigned in publish order

	mu          sync.Mutex
	waiters     map[uint64]*waiter
	returned    map[string]*amqp.Return // message_id -> return awaiting its ack
	blocked     bool                    // the broker blocks publishers (a memory or disk alarm)
	blockReason string                  // the broker's reason, while blocked
	done        chan struct{}           // closed when the channel has closed
	endErr      error                   // why, for publishes that come after
}

type waiter struct {
	msgID    string
	size     int
	exchange string
	key      string
	res      chan error // buffered: the tracker never blocks on it
}

func newSession(conn *amqp.Connection, ch *amqp.Channel, log *slog.Logger) *session {
	s := &session{
		conn: conn, ch: ch, log: log, pub: make(chan struct{}, 1),
		waiters: map[uint64]*waiter{}, returned: map[string]*amqp.Return{}, done: make(chan struct{}),
	}
	// The returns channel is unbuffered on purpose: amqp091 hands over a
	// basic.return, then the ack that follows it, from one goroutine, so
	// with nothing buffered the tracker has recorded the return before it
	// can see that ack. The buffers are generous because amqp091 drops a
	// notification nobody takes within five seconds.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	returns := ch.NotifyReturn(make(chan amqp.Return))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 16))
	go s.track(confirms, returns, chClosed, blocks)
	return s
}

func (s *session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *session) isBlocked() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blockReason, s.blocked
}

func (s *session) lockPublish(ctx context.Context) error {
	select {
	case s.pub <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) unlockPublish() { <-s.pub }

// publish sends one message; the caller holds the publish slot. Its error is
// always unavailable: the channel is unusable.
func (s *session) publish(exchange, key, id string, pub amqp.Publishing) (*waiter, error) {
	w := &waiter{msgID: id, size: len(pub.Body), exchange: exchange, key: key, res: make(chan error, 1)}
	// The caller holds the publish slot, so this is the tag the broker will
	// confirm. Read it before taking s.mu: amqp091 may hold the lock behind
	// it while it waits for the tracker, which needs s.mu.
	tag := s.ch.GetNextPublishSeqNo()
	s.mu.Lock()
	if s.blocked {
		reason := s.blockReason
		s.mu.Unlock()
		return nil, outbox.Unavailable(fmt.Errorf("rabbitmq: broker is blocking publishers: %s", reason))
	}
	if s.endErr != nil || s.ended() {
		err := s.endErr
		s.mu.Unlock()
		return nil, outbox.Unavailable(fmt.Errorf("rabbitmq: channel closed: %w", err))
	}
	s.waiters[tag] = w
	s.mu.Unlock()

	err := s.ch.Publish(exchange, key, true, false, pub)
	if err != nil {
		s.mu.Lock()
		delete(s.waiters, tag)
		s.mu.Unlock()
		return nil, outbox.Unavailable(fmt.Errorf("rabbitmq: publish: %w", err))
	}
	return w, nil
}

// HeaderCloudEventsPrefix prefixes the CloudEvents attributes' headers in
// binary content mode: the AMQP protocol binding's application property
// names (cloudEvents_id, cloudEvents_type...), in the headers table that
// AMQP 0-9-1 has in their place. The binding prefers the '_' separator to
// the older ':' (JMS selectors cannot name the latter).
const HeaderCloudEventsPrefix = "cloudEvents_"

// Publishing returns the AMQP message m becomes: persistent, message_id =
// the event id, type = the event type, timestamp = created_at, and in
// m.Envelope: body = the payload with m.StandardHeaders as headers and
// content_type application/json (the outbox's format); or the AMQP
// binding's binary content mode (body = the payload, content_type =
// application/json, one cloudEvents_ header per attribute) or structured
// mode (body = the JSON event format, content_type =
// application/cloudevents+json, no headers). An error is about the
// message (no CloudEvent can carry it): permanent.
func Publishing(m *outbox.Message) (amqp.Publishing, error) {
	pub := amqp.Publishing{
		Headers: amqp.Table{}, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		MessageId: m.ID.String(), Timestamp: m.CreatedAt, Type: m.EventType, Body: m.Payload,
	}
	switch m.Envelope {
	case outbox.EnvelopeCloudEvents:
		ce, err := m.CloudEvent()
		if err != nil {
			return pub, err
		}
		for _, a := range ce.Attributes() {
			pub.Headers[HeaderCloudEventsPrefix+a.Name] = a.Value
		}
		pub.ContentType = ce.DataContentType
	case outbox.EnvelopeCloudEventsStructured:
		body, err := m.StructuredCloudEvent()
		if err != nil {
			return pub, err
		}
		pub.Body, pub.ContentType = body, outboxtype.CloudEventsJSON
	default:
		for k, v := range m.StandardHeaders() {
			pub.Headers[k] = v
		}
	}
	return pub, nil
}

// track resolves waiters from the channel's confirms and returns, and fails
// the unconfirmed ones when the channel closes.
func (s *session) track(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, chClosed <-chan *amqp.Error, blocks <-chan amqp.Blocking) {
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.mu.Lock()
			s.returned[r.MessageId] = &r
			s.mu.Unlock()
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			s.mu.Lock()
			s.blocked, s.blockReason = b.Active, b.Reason
			s.mu.Unlock()
			if b.Active {
				s.log.Warn("rabbitmq: broker is blocking publishers", "reason", b.Reason)
			} else {
				s.log.Info("rabbitmq: broker unblocked publishers")
			}
		case c, ok := <-confirms:
			if !ok {
				var reason *amqp.Error
				select {
				case reason = <-chClosed: // sent before the confirms close
				default:
				}
				s.fail(reason)
				return
			}
			s.mu.Lock()
			w := s.waiters[c.DeliveryTag]
			delete(s.waiters, c.DeliveryTag)
			var ret *amqp.Return
			if w != nil {
				ret = s.returned[w.msgID]
				delete(s.returned, w.msgID)
			}
			s.mu.Unlock()
			switch {
			case w == nil: // its publish was abandoned
			case !c.Ack:
				w.res <- nacked(w.exchange, w.key)
			case ret != nil:
				w.res <- unroutable(ret)
			default:
				w.res <- nil
			}
		}
	}
}

// fail ends the session after its channel closed with reason (nil: closed
// by us or with the connection, without a server error).
func (s *session) fail(reason *amqp.Error) {
	connLost := reason == nil || !reason.Recover || s.conn.IsClosed()
	var cause error = amqp.ErrClosed
	if reason != nil {
		cause = reason
	}
	s.mu.Lock()
	s.endErr = cause
	pending := s.waiters
	s.waiters = nil
	close(s.done)
	s.mu.Unlock()
	if connLost {
		s.log.Warn("rabbitmq: connection lost", "err", cause, "unconfirmed", len(pending))
	} else {
		s.log.Warn("rabbitmq: channel closed by the broker", "err", cause, "unconfirmed", len(pending))
		// The next publish reconnects. Not from this goroutine: closing waits
		// on amqp091's reader, which may be waiting on this tracker.
		go func() { _ = s.conn.CloseDeadline(time.Now().Add(time.Second)) }()
	}

	tags := make([]uint64, 0, len(pending))
	for t := range pending {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	// A channel error was caused by one message: one over the broker's size
	// limit if the reason names one, else the first unconfirmed. The others
	// were discarded unseen, through no fault of their own.
	limit, sizeErr := sizeLimit(reason)
	culprit := -1
	if !connLost && !sizeErr && len(tags) > 0 {
		culprit = 0
	}
	for i, t := range tags {
		w := pending[t]
		switch {
		case connLost:
			w.res <- outbox.Unavailable(fmt.Errorf("rabbitmq: connection closed before the broker confirmed the message: %w", cause))
		case sizeErr && w.size > limit:
			w.res <- outbox.Permanent(fmt.Errorf("rabbitmq: message of %d bytes refused by the broker: %w", w.size, cause))
		case i == culprit:
			w.res <- classifyChannelError(reason, w.exchange)
		default:
			w.res <- outbox.Unavailable(fmt.Errorf("rabbitmq: channel closed by another message's error before this one was confirmed: %w", cause))
		}
	}
}

func (s *session) close() error {
	err := s.conn.CloseDeadline(time.Now().Add(5 * time.Second))
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
