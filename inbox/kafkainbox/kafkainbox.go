package kafkainbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults for Config's zero values.
const (
	DefaultRetryBase     = 250 * time.Millisecond
	DefaultRetryMax      = 30 * time.Second
	DefaultCommitTimeout = 10 * time.Second
	DefaultMaxPoll       = 500
)

// Config configures a Consumer. Zero values mean the documented defaults;
// New rejects invalid values with an *outboxtype.ConfigError naming the
// field.
type Config struct {
	// RetryBase and RetryMax space the retries of a record whose handler
	// failed: RetryBase doubling up to RetryMax, with jitter. Defaults to
	// DefaultRetryBase (250ms) and DefaultRetryMax (30s).
	RetryBase, RetryMax time.Duration
	// MaxPoll bounds the records processed between two offset commits.
	// Defaults to DefaultMaxPoll (500).
	MaxPoll int
	// CommitTimeout bounds an offset commit, including the last one Run makes
	// after ctx is cancelled. Defaults to DefaultCommitTimeout (10s).
	CommitTimeout time.Duration
	// Logger receives a line per failed attempt, skipped record and failed
	// commit (event_id, event_type, aggregate_id, attempt, topic, partition,
	// offset). Defaults to
	// discarding them.
	Logger *slog.Logger
}

// Consumer feeds Kafka records to an inbox.Processor and commits offsets
// after it committed.
type Consumer struct {
	proc inbox.Processor
	cfg  Config
	log  *slog.Logger
}

// bad returns the *outboxtype.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outboxtype.ConfigError{Config: "kafkainbox.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Consumer processing records with proc.
func New(proc inbox.Processor, cfg Config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("kafkainbox: New: processor is nil")
	}
	cfg.RetryBase = cmp.Or(cfg.RetryBase, DefaultRetryBase)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, DefaultRetryMax)
	cfg.CommitTimeout = cmp.Or(cfg.CommitTimeout, DefaultCommitTimeout)
	cfg.MaxPoll = cmp.Or(cfg.MaxPoll, DefaultMaxPoll)
	switch {
	case cfg.RetryBase < 0:
		return nil, bad("RetryBase", "%s must be positive", cfg.RetryBase)
	case cfg.RetryBase > cfg.RetryMax:
		return nil, bad("RetryBase", "%s: must not exceed RetryMax (%s)", cfg.RetryBase, cfg.RetryMax)
	case cfg.MaxPoll < 1:
		return nil, bad("MaxPoll", "%d must be at least 1", cfg.MaxPoll)
	case cfg.CommitTimeout < 0:
		return nil, bad("CommitTimeout", "%s must be positive", cfg.CommitTimeout)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{proc: proc, cfg: cfg, log: log}, nil
}

// ToMessage builds an inbox.Message from a record's headers (the last value
// of a repeated key wins) and value. An error wraps inbox.ErrInvalidMessage.
func ToMessage(r *kgo.Record) (inbox.Message, error) {
	h := make(map[string]string, len(r.Headers))
	for _, rh := range r.Headers {
		h[rh.Key] = string(rh.Value)
	}
	return inbox.MessageFromHeaders(h, r.Value)
}

// ErrAutoCommit is returned by Run for a client that would commit offsets by
// itself, before records are processed.
var ErrAutoCommit = errors.New("kafkainbox: the client must be created with kgo.DisableAutoCommit() and a kgo.ConsumerGroup")

// Run polls cl, processes every record and commits offsets after each batch,
// until ctx is cancelled (it then commits what it finished and returns nil)
// or cl is closed. cl is the caller's: Run does not close it. cl must be a
// consumer group client with autocommit disabled (ErrAutoCommit otherwise).
// With kgo.BlockRebalanceOnPoll, Run allows the rebalance after each commit.
func (c *Consumer) Run(ctx context.Context, cl *kgo.Client) error {
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		return ErrAutoCommit
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		return ErrAutoCommit
	}
	for {
		fetches := cl.PollRecords(ctx, c.cfg.MaxPoll)
		if fetches.IsClientClosed() {
			return fmt.Errorf("kafkainbox: %w", kgo.ErrClientClosed)
		}
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			c.log.LogAttrs(ctx, slog.LevelWarn, "kafkainbox: fetch", slog.String("topic", topic),
				slog.Int("partition", int(p)), slog.Any("err", err))
		})
		var done []*kgo.Record
		var stopped bool
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				if stopped {
					return
				}
				if !c.process(ctx, r) {
					stopped = true // ctx cancelled; r is not done
					return
				}
				done = append(done, r)
			}
		})
		if err := c.commit(ctx, cl, done); err != nil {
			// Not fatal: the records come back and are skipped as duplicates.
			c.log.LogAttrs(ctx, slog.LevelWarn, "kafkainbox: offset commit failed; these records will be redelivered and skipped",
				slog.Int("records", len(done)), slog.Any("err", err))
		}
		cl.AllowRebalance()
		if stopped {
			return nil
		}
	}
}

func (c *Consumer) commit(ctx context.Context, cl *kgo.Client, rs []*kgo.Record) error {
	if len(rs) == 0 {
		return nil
	}
	// Commit what is done even when stopping.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.CommitTimeout)
	defer cancel()
	return cl.CommitRecords(cctx, rs...)
}

// process handles r until it succeeds, is a duplicate or is invalid (true),
// or ctx is cancelled (false).
func (c *Consumer) process(ctx context.Context, r *kgo.Record) bool {
	m, err := ToMessage(r)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelError, "kafkainbox: skipping invalid record",
			slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset), slog.Any("err", err))
		return true
	}
	for attempt := 1; ; attempt++ {
		_, err := c.proc(ctx, m)
		if err == nil {
			return true
		}
		if errors.Is(err, inbox.ErrInvalidMessage) {
			c.log.LogAttrs(ctx, slog.LevelError, "kafkainbox: skipping invalid record",
				slog.String("topic", r.Topic), slog.Int64("offset", r.Offset), slog.Any("err", err))
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		wait := backoff(c.cfg.RetryBase, c.cfg.RetryMax, attempt)
		c.log.LogAttrs(ctx, slog.LevelWarn, "kafkainbox: handler failed, retrying",
			slog.String("event_id", m.ID.String()), slog.String("event_type", m.EventType),
			slog.String("aggregate_id", m.AggregateID), slog.Int("attempt", attempt),
			slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
			slog.Duration("retry_in", wait), slog.Any("err", err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// backoff is base·2^(n-1) capped at max, with jitter between half and all.
func backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + rand.N(d/2+1)
}
