package outbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/rate"
)

// Defaults of NotifierConfig's fields, used for their zero values.
const (
	DefaultNotifyInterval    = 2 * time.Millisecond  // NotifierConfig.Interval
	DefaultNotifyMaxInterval = 20 * time.Millisecond // NotifierConfig.MaxInterval
	DefaultNotifySlowAbove   = 1500                  // NotifierConfig.SlowAbove
)

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	// Schema and Table name the outbox table, as in WriterConfig: the
	// notification channel is derived from them, so it matches the relay's.
	Schema string
	Table  string
	// Interval is the most notifications one Notifier sends: at most one per
	// Interval, and never later than Interval after a Notify call. Defaults
	// to DefaultNotifyInterval (2ms).
	Interval time.Duration
	// MaxInterval and SlowAbove space notifications out under a heavy
	// stream: once Notify is called more than SlowAbove times a second,
	// notifications are MaxInterval apart, until the calls fall below three
	// quarters of SlowAbove (writers slowed by the notifications and the
	// claims they cause must not get them back). Each notification is a
	// statement on the database and a wake-up of every listening relay,
	// and under a heavy stream both are taken from the writers, while the
	// relay then claims in bigger batches anyway (RelayConfig.BatchDelay). Set MaxInterval to Interval to keep
	// a fixed spacing. Defaults to DefaultNotifyMaxInterval (20ms), or to
	// Interval if that is longer.
	MaxInterval time.Duration
	// SlowAbove is the rate of Notify calls per second above which
	// notifications are spaced out (see MaxInterval). Defaults to
	// DefaultNotifySlowAbove (1500).
	SlowAbove int
	// Logger receives send failures at debug level (a missed notification
	// costs at most the relay's PollInterval). Defaults to discarding logs.
	Logger *slog.Logger
}

// Notifier wakes relays in other processes (RelayConfig.Listen) right after
// the application commits events, so they need not wait for their next poll.
//
// Why not a trigger? A trigger calls pg_notify inside every inserting
// transaction, and PostgreSQL serializes the commits of all transactions
// that notified (they take a database-wide lock on the notification queue),
// so concurrent writers queue behind each other at commit. A Notifier sends its notification on its own tiny autocommit statement, after
// the business transaction committed, debounced to one per Interval for the
// whole process. Writers never take the lock.
//
//	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { ...; _, err := w.Write(ctx, tx, ev); return err }); err == nil {
//		notifier.Notify()
//	}
//
// A relay in the same process needs no Notifier: call Relay.Wake.
type Notifier struct {
	pool        *pgxpool.Pool
	channel     string
	interval    time.Duration
	maxInterval time.Duration
	log         *slog.Logger

	mu      sync.Mutex
	timer   *time.Timer // non-nil while inside an interval
	pending bool        // a Notify arrived inside the interval
	closed  bool
	calls   rate.Window // Notify calls per second
	heavy   rate.Gate   // Above: SlowAbove
	wg      sync.WaitGroup
}

// NewNotifier validates cfg and returns a Notifier sending through pool.
func NewNotifier(pool *pgxpool.Pool, cfg NotifierConfig) (*Notifier, error) {
	if pool == nil {
		return nil, fmt.Errorf("outbox: NewNotifier: pool is nil")
	}
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, ident.ConfigErr("NotifierConfig", err)
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultNotifyInterval)
	cfg.MaxInterval = cmp.Or(cfg.MaxInterval, max(DefaultNotifyMaxInterval, cfg.Interval))
	cfg.SlowAbove = cmp.Or(cfg.SlowAbove, DefaultNotifySlowAbove)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Config: "NotifierConfig", Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case cfg.Interval < 0:
		return nil, bad("Interval", "%s must not be negative", cfg.Interval)
	case cfg.MaxInterval < cfg.Interval:
		return nil, bad("MaxInterval", "%s is shorter than Interval %s", cfg.MaxInterval, cfg.Interval)
	case cfg.SlowAbove < 0:
		return nil, bad("SlowAbove", "%d must not be negative", cfg.SlowAbove)
	}
	return &Notifier{pool: pool, channel: n.Channel, interval: cfg.Interval, maxInterval: cfg.MaxInterval,
		log: cfg.Logger, calls: rate.Window{Span: 100 * time.Millisecond}, heavy: rate.Gate{Above: float64(cfg.SlowAbove)}}, nil
}

// Notify tells listening relays that events were committed. It never blocks
// and never fails the caller: the send happens in the background. Call it
// after Commit returned, not inside the transaction.
func (n *Notifier) Notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.calls.Add(time.Now(), 1)
	if n.timer != nil {
		n.pending = true // sent at the end of the interval (trailing edge)
		return
	}
	n.sendLocked()
	n.timer = time.AfterFunc(n.spacingLocked(), n.tick)
}

// spacingLocked is the wait before the next notification may go out:
// Interval, or MaxInterval under a heavy stream of Notify calls (see
// NotifierConfig.MaxInterval).
func (n *Notifier) spacingLocked() time.Duration {
	if n.heavy.Heavy(n.calls.Rate(time.Now())) {
		return n.maxInterval
	}
	return n.interval
}

func (n *Notifier) tick() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending && !n.closed {
		n.pending = false
		n.sendLocked()
		n.timer = time.AfterFunc(n.spacingLocked(), n.tick)
		return
	}
	n.timer = nil
}

func (n *Notifier) sendLocked() {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// A NOTIFY is sent at commit and its transaction gets an xid, so
		// with synchronous_commit on, the wake-up would wait for a WAL
		// flush, one more on the latency path after the writer's own. A
		// notification lost in a crash costs a poll; the setting is local
		// to this statement's transaction.
		if _, err := n.pool.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, '')`, n.channel); err != nil {
			n.log.Debug("outbox notify failed; relays fall back to polling", "err", err)
		}
	}()
}

// Close sends the pending trailing notification, if any, stops the Notifier
// and waits for notifications in flight.
func (n *Notifier) Close() {
	n.mu.Lock()
	if n.timer != nil {
		n.timer.Stop()
		n.timer = nil
	}
	if n.pending && !n.closed {
		n.pending = false
		n.sendLocked()
	}
	n.closed = true
	n.mu.Unlock()
	n.wg.Wait()
}
