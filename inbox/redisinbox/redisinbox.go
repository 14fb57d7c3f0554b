package redisinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults for Config's zero values.
const (
	DefaultCount     = 10
	DefaultBlock     = time.Second
	DefaultClaimIdle = 30 * time.Second
)

// Config configures a Consumer. Zero values mean the documented defaults;
// Stream, Group and Consumer are required.
type Config struct {
	// Stream is the stream to read.
	Stream string
	// Group is the consumer group; create it first (EnsureGroup, or XGROUP
	// CREATE at deploy time).
	Group string
	// Consumer names this instance within the group (a hostname, a pod name).
	// Keep it stable across restarts: a restarted consumer then also finds its
	// own pending entries at once, without waiting for ClaimIdle.
	Consumer string
	// Count is the most entries read or claimed per call. Defaults to
	// DefaultCount (10).
	Count int
	// Block is how long one XREADGROUP waits for new entries; it bounds how
	// long Run takes to notice ctx. Defaults to DefaultBlock (1s).
	Block time.Duration
	// ClaimIdle is how long an entry must have been pending (delivered, not
	// acknowledged) before Run claims it. Defaults to DefaultClaimIdle
	// (30s).
	ClaimIdle time.Duration
	// ClaimInterval is how often Run looks for such entries. Defaults to
	// half of ClaimIdle.
	ClaimInterval time.Duration
	// Logger receives a line per failed or invalid entry (event_id,
	// event_type, aggregate_id, entry_id). Defaults to
	// discarding them.
	Logger *slog.Logger
}

// Consumer feeds stream entries to an inbox.Processor and acknowledges them
// after it committed.
type Consumer struct {
	client goredis.UniversalClient
	proc   inbox.Processor
	cfg    Config
	log    *slog.Logger
}

// bad returns the *outboxtype.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outboxtype.ConfigError{Config: "redisinbox.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Consumer reading with client (the
// caller's) and processing entries with proc.
func New(client goredis.UniversalClient, proc inbox.Processor, cfg Config) (*Consumer, error) {
	if client == nil {
		return nil, errors.New("redisinbox: New: client is nil")
	}
	if proc == nil {
		return nil, errors.New("redisinbox: New: processor is nil")
	}
	for field, v := range map[string]string{"Stream": cfg.Stream, "Group": cfg.Group, "Consumer": cfg.Consumer} {
		if v == "" {
			return nil, bad(field, "required")
		}
	}
	cfg.Count = cmp.Or(cfg.Count, DefaultCount)
	cfg.Block = cmp.Or(cfg.Block, DefaultBlock)
	cfg.ClaimIdle = cmp.Or(cfg.ClaimIdle, DefaultClaimIdle)
	cfg.ClaimInterval = cmp.Or(cfg.ClaimInterval, cfg.ClaimIdle/2)
	switch {
	case cfg.Count < 1:
		return nil, bad("Count", "%d must be at least 1", cfg.Count)
	case cfg.Block < time.Millisecond:
		return nil, bad("Block", "%s must be at least 1ms", cfg.Block)
	case cfg.ClaimIdle < time.Millisecond:
		return nil, bad("ClaimIdle", "%s must be at least 1ms", cfg.ClaimIdle)
	case cfg.ClaimInterval < time.Millisecond:
		return nil, bad("ClaimInterval", "%s must be at least 1ms", cfg.ClaimInterval)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{client: client, proc: proc, cfg: cfg, log: log}, nil
}

// EnsureGroup creates group on stream, reading from the stream's first entry,
// and the stream if it does not exist; an existing group is left as it is.
// It is an explicit, opt-in operator action, as nats.EnsureStream is.
func EnsureGroup(ctx context.Context, client goredis.UniversalClient, stream, group string) error {
	err := client.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisinbox: create group %q on %q: %w", group, stream, err)
	}
	return nil
}

// ToMessage builds an inbox.Message from an entry written by the redis
// publisher. An error wraps inbox.ErrInvalidMessage.
func ToMessage(x goredis.XMessage) (inbox.Message, error) {
	h := make(map[string]string, len(x.Values))
	var payload []byte
	for k, v := range x.Values {
		s, ok := v.(string)
		if !ok {
			s = fmt.Sprint(v)
		}
		switch {
		case k == outboxtype.RedisFieldPayload:
			payload = []byte(s)
		case strings.HasPrefix(k, outboxtype.RedisHeaderPrefix):
			h[strings.TrimPrefix(k, outboxtype.RedisHeaderPrefix)] = s
		case strings.HasPrefix(k, outboxtype.RedisFieldCloudEventsPrefix), k == outboxtype.RedisFieldContentType:
			h[k] = s // a CloudEvent's attributes
		}
	}
	fallbacks := map[string]string{
		outboxtype.HeaderEventID: outboxtype.RedisFieldID, outboxtype.HeaderEventType: outboxtype.RedisFieldEventType,
		outboxtype.HeaderAggregateType: outboxtype.RedisFieldAggregateType, outboxtype.HeaderAggregateID: outboxtype.RedisFieldAggregateID,
		outboxtype.HeaderCreatedAt: outboxtype.RedisFieldCreatedAt,
	}
	for header, field := range fallbacks {
		if _, ok := h[header]; !ok {
			if v, ok := x.Values[field].(string); ok {
				h[header] = v
			}
		}
	}
	m, err := inbox.MessageFromHeaders(h, payload)
	if err != nil {
		return m, fmt.Errorf("redisinbox: entry %s: %w", x.ID, err)
	}
	return m, nil
}

// Handle processes one entry and settles it: XACK after the processor
// succeeded (Result.Duplicate included) and for an entry that can never be
// processed; nothing after a failure, so the entry stays pending and is
// claimed again after ClaimIdle. It returns the processor's result and error;
// a failed XACK is returned too (the effects are committed and the claimed
// redelivery will be a duplicate).
func (c *Consumer) Handle(ctx context.Context, x goredis.XMessage) (inbox.Result, error) {
	m, err := ToMessage(x)
	var res inbox.Result
	if err == nil {
		res, err = c.proc(ctx, m)
	}
	if err != nil && !errors.Is(err, inbox.ErrInvalidMessage) {
		c.log.LogAttrs(ctx, slog.LevelWarn, "redisinbox: handler failed; the entry stays pending and will be claimed again",
			slog.String("event_id", m.ID.String()), slog.String("event_type", m.EventType),
			slog.String("aggregate_id", m.AggregateID), slog.String("entry_id", x.ID), slog.Any("err", err))
		return res, err
	}
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelError, "redisinbox: acknowledging an invalid entry without processing it",
			slog.String("stream", c.cfg.Stream), slog.String("entry_id", x.ID), slog.Any("err", err))
	}
	// XACK even when ctx is cancelled: the commit happened.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ackErr := c.client.XAck(actx, c.cfg.Stream, c.cfg.Group, x.ID).Err(); ackErr != nil {
		return res, errors.Join(err, fmt.Errorf("redisinbox: entry %s: xack: %w", x.ID, ackErr))
	}
	return res, err
}

// Run reads and handles entries until ctx is cancelled, then returns nil.
// It first claims idle pending entries (recovering a previous crash), then
// alternates XREADGROUP for new entries with XAUTOCLAIM every ClaimInterval.
// Redis errors are logged and retried after a pause; Run returns an error
// only when the group or stream is missing (NOGROUP).
func (c *Consumer) Run(ctx context.Context) error {
	lastClaim := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastClaim) >= c.cfg.ClaimInterval {
			if err := c.claim(ctx); err != nil {
				if err := c.pause(ctx, "xautoclaim", err); err != nil {
					return err
				}
				continue
			}
			lastClaim = time.Now()
		}
		block := min(c.cfg.Block, max(time.Millisecond, c.cfg.ClaimInterval-time.Since(lastClaim)))
		streams, err := c.client.XReadGroup(ctx, &goredis.XReadGroupArgs{
			Group: c.cfg.Group, Consumer: c.cfg.Consumer, Streams: []string{c.cfg.Stream, ">"},
			Count: int64(c.cfg.Count), Block: block,
		}).Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			if err := c.pause(ctx, "xreadgroup", err); err != nil {
				return err
			}
			continue
		}
		for _, s := range streams {
			for _, x := range s.Messages {
				if ctx.Err() != nil {
					return nil // left pending: claimed again later
				}
				_, _ = c.Handle(ctx, x) // logged
			}
		}
	}
	return nil
}

// claim takes over entries pending longer than ClaimIdle, a page at a time,
// and handles them.
func (c *Consumer) claim(ctx context.Context) error {
	start := "0-0"
	for ctx.Err() == nil {
		msgs, next, err := c.client.XAutoClaim(ctx, &goredis.XAutoClaimArgs{
			Stream: c.cfg.Stream, Group: c.cfg.Group, Consumer: c.cfg.Consumer,
			MinIdle: c.cfg.ClaimIdle, Start: start, Count: int64(c.cfg.Count),
		}).Result()
		if err != nil {
			return err
		}
		for _, x := range msgs {
			if ctx.Err() != nil {
				return nil
			}
			_, _ = c.Handle(ctx, x)
		}
		if next == "0-0" || next == "" {
			return nil
		}
		start = next
	}
	return nil
}

// pause logs err and waits a little; a missing group or stream ends Run.
func (c *Consumer) pause(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		return fmt.Errorf("redisinbox: %s on %q: %w (create the group: EnsureGroup or XGROUP CREATE)", op, c.cfg.Stream, err)
	}
	c.log.LogAttrs(ctx, slog.LevelWarn, "redisinbox: "+op, slog.String("stream", c.cfg.Stream), slog.Any("err", err))
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}
