package natsinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// DefaultWorkers is Config.Workers's default.
const DefaultWorkers = 1

// Config configures a Consumer. Zero values mean the documented defaults;
// New rejects invalid values with an *outboxtype.ConfigError naming the
// field.
type Config struct {
	// NakDelay asks JetStream to wait this long before redelivering a message
	// whose handler failed. Zero: a plain Nak, redelivered at once (or per the
	// consumer's BackOff).
	NakDelay time.Duration
	// AckSync waits for the server to confirm each Ack (DoubleAck). A lost Ack
	// costs only a redelivery that the inbox skips, so it is off by default.
	AckSync bool
	// Workers is how many messages Run processes concurrently. Defaults to
	// DefaultWorkers (1).
	Workers int
	// Logger receives a line per failed or invalid message and per failed
	// acknowledgement (event_id, event_type, aggregate_id, attempt).
	// Defaults to discarding them.
	Logger *slog.Logger
}

// Consumer feeds JetStream messages to an inbox.Processor and acknowledges
// them after it committed. It is safe for concurrent use.
type Consumer struct {
	proc inbox.Processor
	cfg  Config
	log  *slog.Logger
}

// bad returns the *outboxtype.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outboxtype.ConfigError{Config: "natsinbox.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Consumer processing messages with proc.
func New(proc inbox.Processor, cfg Config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("natsinbox: New: processor is nil")
	}
	if cfg.NakDelay < 0 {
		return nil, bad("NakDelay", "%s must not be negative", cfg.NakDelay)
	}
	cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
	if cfg.Workers < 1 || cfg.Workers > 1024 {
		return nil, bad("Workers", "%d must be between 1 and 1024", cfg.Workers)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{proc: proc, cfg: cfg, log: log}, nil
}

// ToMessage builds an inbox.Message from a JetStream message's headers
// (outbox.HeaderEventID and the other standard headers, first value of each)
// and data. An error wraps inbox.ErrInvalidMessage.
func ToMessage(msg jetstream.Msg) (inbox.Message, error) {
	h := make(map[string]string, len(msg.Headers()))
	for k, vs := range msg.Headers() {
		if len(vs) > 0 {
			h[k] = vs[0]
		}
	}
	return inbox.MessageFromHeaders(h, msg.Data())
}

// Handle processes one message and settles it with JetStream: Ack after the
// processor succeeded (Result.Duplicate included), Nak after it failed, Term
// for a message that can never be processed. It returns the processor's
// result and error; a failed Ack is returned too (the effects are committed
// and the redelivery will be a duplicate).
func (c *Consumer) Handle(ctx context.Context, msg jetstream.Msg) (inbox.Result, error) {
	m, err := ToMessage(msg)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelError, "natsinbox: terminating invalid message",
			slog.String("subject", msg.Subject()), slog.Any("err", err))
		// Plain Term, not TermWithReason: servers before 2.10.4 ignore the
		// latter and redeliver the message forever. The reason is logged.
		if termErr := msg.Term(); termErr != nil {
			return inbox.Result{}, errors.Join(err, fmt.Errorf("natsinbox: term: %w", termErr))
		}
		return inbox.Result{}, err
	}
	res, err := c.proc(ctx, m)
	if err != nil {
		if errors.Is(err, inbox.ErrInvalidMessage) {
			c.log.LogAttrs(ctx, slog.LevelError, "natsinbox: terminating invalid message",
				slog.String("subject", msg.Subject()), slog.Any("err", err))
			_ = msg.Term()
			return res, err
		}
		c.log.LogAttrs(ctx, slog.LevelWarn, "natsinbox: handler failed, message will be redelivered",
			append(attrs(m, msg), slog.Any("err", err))...)
		var nakErr error
		if c.cfg.NakDelay > 0 {
			nakErr = msg.NakWithDelay(c.cfg.NakDelay)
		} else {
			nakErr = msg.Nak()
		}
		if nakErr != nil {
			// JetStream redelivers after AckWait anyway.
			return res, errors.Join(err, fmt.Errorf("natsinbox: nak: %w", nakErr))
		}
		return res, err
	}
	var ackErr error
	if c.cfg.AckSync {
		ackErr = msg.DoubleAck(ctx)
	} else {
		ackErr = msg.Ack()
	}
	if ackErr != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "natsinbox: ack failed after commit; the redelivery will be skipped as a duplicate",
			append(attrs(m, msg), slog.Any("err", ackErr))...)
		return res, fmt.Errorf("natsinbox: event %s committed, ack failed: %w", m.ID, ackErr)
	}
	return res, nil
}

func attrs(m inbox.Message, msg jetstream.Msg) []slog.Attr {
	a := []slog.Attr{
		slog.String("event_id", m.ID.String()), slog.String("event_type", m.EventType),
		slog.String("aggregate_id", m.AggregateID),
	}
	if md, err := msg.Metadata(); err == nil {
		a = append(a, slog.Uint64("attempt", md.NumDelivered))
	}
	return a
}

// Run pulls messages from cons and handles each until ctx is cancelled, then
// returns nil. opts tune the pull (jetstream.PullMaxMessages and the like);
// messages pulled but not yet handled when Run stops are not acknowledged
// and come back after AckWait. A message in flight when ctx is cancelled
// sees its transaction rolled back and is Nak'ed. Run returns an error if the
// subscription cannot be made or ends for another reason (the connection
// closed).
func (c *Consumer) Run(ctx context.Context, cons jetstream.Consumer, opts ...jetstream.PullMessagesOpt) error {
	it, err := cons.Messages(opts...)
	if err != nil {
		return fmt.Errorf("natsinbox: subscribe: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()

	var wg sync.WaitGroup
	errs := make([]error, c.cfg.Workers)
	for w := range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				msg, err := it.Next()
				if err != nil {
					if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						if ctx.Err() == nil {
							errs[w] = fmt.Errorf("natsinbox: subscription closed: %w", err)
						}
						it.Stop() // end the other workers too
						return
					}
					// Missed heartbeats and the like: the iterator recovers.
					c.log.LogAttrs(ctx, slog.LevelWarn, "natsinbox: pull", slog.Any("err", err))
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				_, _ = c.Handle(ctx, msg) // logged; settled with the broker
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
