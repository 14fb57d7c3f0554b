// Package engine is the relay's claim → publish → mark loop. The public
// outbox.Relay configures it; nothing here is part of the API.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/store"
)

// Row is one claimed outbox row.
type Row struct {
	ID            uuid.UUID
	Seq           int64
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       []byte
	Headers       map[string]string
	CreatedAt     time.Time
	Attempts      int  // attempts before this one
	Failed        bool // a failure was recorded (last_error): it may hold later events
	Follower      bool // ordered mode: claimed as part of the run after its aggregate's head

	// Bad says why the row cannot be published as stored (headers that are
	// not a JSON object of strings, written by hand): it is dead-lettered
	// without a publish, and the rest of the batch goes on.
	Bad error
}

// Class is how a publish error is handled.
type Class int

// Error classes, mirroring outbox.ErrorClass.
const (
	Transient Class = iota
	Permanent
	Unavailable
)

// Backoff is an exponential backoff with jitter.
type Backoff struct {
	Base, Max time.Duration
}

// Delay returns the wait before retry number n (n >= 1): Base*2^(n-1) capped at
// Max, with "equal jitter" (half fixed, half random) so a burst of failures
// spreads out without ever retrying immediately.
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// maxRequestedDelay caps a broker's Retry-After, so a hostile or buggy
// endpoint cannot park an event for years.
const maxRequestedDelay = 24 * time.Hour

// Config is the engine's validated configuration.
type Config struct {
	Names           ident.Names
	BatchSize       int
	Workers         int
	PollInterval    time.Duration
	MaxAttempts     int
	RetryBackoff    Backoff
	OutageBackoff   Backoff
	PublishTimeout  time.Duration
	StatsInterval   time.Duration
	RescanInterval  time.Duration // how often a claim scans the pending index from its start
	BatchDelay      time.Duration // claim pace under a heavy stream (0: always follow wake-ups)
	BatchDelayAbove int           // events/s above which claims are paced

	Retention       time.Duration // 0: no cleanup loop
	CleanupInterval time.Duration
	CleanupBatch    int

	// DeleteOnPublish deletes published rows instead of marking them.
	DeleteOnPublish bool

	// Ordered claims only the earliest unprocessed event of each aggregate.
	Ordered bool

	// Listen makes the engine LISTEN on Names.Channel on a dedicated
	// connection and wake a worker on every notification.
	Listen bool

	Logger  *slog.Logger
	Metrics *metrics.Metrics

	// Publish sends rows and returns one error per row (nil slice: all ok).
	Publish func(ctx context.Context, rows []*Row) []error
	// Classify maps a publish error to its class.
	Classify func(error) Class
	// IsTimeout reports a publish that ran out of time.
	IsTimeout func(error) bool
	// RequestedDelay returns the wait a publish error asks for (Retry-After).
	RequestedDelay func(error) (time.Duration, bool)
}

// Engine runs the relay.
type Engine struct {
	cfg  Config
	q    *store.Queries
	pool *pgxpool.Pool
	wake chan struct{}
	cur  *cursor
	rate *rateMeter
	// limit is the batch size claims use: BatchSize, halved while publishes
	// are slow (see adapt).
	limit atomic.Int64
	// window is how many pending rows past the floor a sparse ordered claim
	// looks for aggregate heads in, as a multiple of limit (see adaptWindow).
	window atomic.Int64
	// sparse: the last ordered batches were mostly runs of few aggregates
	// (see adaptSparse).
	sparse atomic.Bool

	brokerDown atomic.Bool
	lastClaim  atomic.Int64 // when the last claim started, Unix ns
	pacing     atomic.Bool  // a worker paces the claims of a heavy stream
}

// New returns an engine; cfg must be validated by the caller.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	e := &Engine{cfg: cfg, q: store.New(cfg.Names, cfg.DeleteOnPublish), pool: pool,
		wake: make(chan struct{}, 1), cur: newCursor(cfg.RescanInterval, cfg.Ordered),
		rate: newRateMeter(cfg.BatchDelay, cfg.BatchDelayAbove)}
	e.limit.Store(int64(cfg.BatchSize))
	e.window.Store(minWindow)
	return e
}

// Wake makes an idle worker claim at once instead of waiting for the poll.
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// BrokerDown reports whether the last batch found the broker unreachable.
func (e *Engine) BrokerDown() bool { return e.brokerDown.Load() }

// ErrMissingIndex reports a table from before the latest migration.
var ErrMissingIndex = errors.New("index missing")

// CheckSchema verifies that the table exists with every column and index this
// version needs.
func (e *Engine) CheckSchema(ctx context.Context) error {
	rows, err := e.pool.Query(ctx, e.q.CheckColumns)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return err
	}
	idx := e.cfg.Names.AggregateIndex
	if e.cfg.Names.QSchema != "" {
		idx = e.cfg.Names.QSchema + "." + idx
	}
	var ok bool
	if err := e.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, idx).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrMissingIndex, idx)
	}
	return nil
}

// Run starts the workers and the housekeeping loops and blocks until ctx is
// cancelled and every batch in flight has been finished or rolled back.
func (e *Engine) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range e.cfg.Workers {
		wg.Go(func() { e.worker(ctx, i) })
	}
	wg.Go(func() { e.statsLoop(ctx) })
	if e.cfg.Listen {
		wg.Go(func() { e.listenLoop(ctx) })
	}
	if e.cfg.Retention > 0 {
		wg.Go(func() { e.cleanupLoop(ctx) })
	}
	wg.Wait()
	return nil
}

func (e *Engine) worker(ctx context.Context, id int) {
	log := e.cfg.Logger.With("worker", id)
	outages := 0
	for ctx.Err() == nil {
		res, err := e.Batch(ctx)
		var wait time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			outages++
			if e.cfg.Metrics != nil {
				e.cfg.Metrics.DBErrors.Inc()
			}
			wait = e.cfg.OutageBackoff.Delay(outages)
			log.Error("outbox relay batch failed", "err", err, "retry_in", wait)
		case res.Unavailable > 0:
			outages++
			wait = e.cfg.OutageBackoff.Delay(outages)
			log.Warn("broker unavailable, relay backing off; no attempt counted",
				"events", res.Unavailable, "err", res.UnavailableErr, "retry_in", wait)
		case res.Full:
			outages = 0
			continue // a full batch: more is likely waiting
		default:
			outages = 0
			wait = e.cfg.PollInterval
		}
		if !e.waitForWork(ctx, wait, err == nil && res.Unavailable == 0) {
			return
		}
	}
}

// waitForWork waits d, or until a wake-up when wakeable; false when ctx is
// done. Under a heavy stream (rateMeter) the relay stops following wake-ups
// and paces its claims instead: one worker claims BatchDelay after the last
// claim of any worker, the others wait for the poll, so each claim gathers
// many events (BENCHMARKS.md, write cost).
func (e *Engine) waitForWork(ctx context.Context, d time.Duration, wakeable bool) bool {
	if wakeable {
		now := time.Now()
		if pace := e.rate.delay(now); pace > 0 {
			if e.pacing.CompareAndSwap(false, true) {
				defer e.pacing.Store(false)
				at := time.Unix(0, e.lastClaim.Load()).Add(pace)
				return e.sleep(ctx, max(at.Sub(now), 0), false)
			}
			return e.sleep(ctx, d, false)
		}
	}
	return e.sleep(ctx, d, wakeable)
}

// sleep waits d, or until a wake-up when wakeable; false when ctx is done.
func (e *Engine) sleep(ctx context.Context, d time.Duration, wakeable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = e.wake
	}
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}

// Result summarizes one batch.
type Result struct {
	Claimed        int
	Full           bool // Claimed reached the batch size in force
	Published      int
	Retried        int // transient failures, attempt counted
	DeadLettered   int
	Unavailable    int // left untouched: broker down
	UnavailableErr error
}

// Batch claims, publishes and marks one batch. Once rows are claimed the
// batch runs to its end even if ctx is cancelled (bounded by the publish
// timeout), so shutdown never wastes a confirmed publish; it never marks a
// row the broker did not confirm.
func (e *Engine) Batch(ctx context.Context) (Result, error) {
	var res Result
	if err := ctx.Err(); err != nil {
		return res, err
	}
	start := time.Now()
	e.lastClaim.Store(start.UnixNano())
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	// From here on the batch is finished with a context that shutdown does not
	// cancel; the deferred rollback covers every early return.
	bg := context.WithoutCancel(ctx)
	inTx := false
	defer func() {
		if inTx {
			if _, err := conn.Exec(bg, "ROLLBACK"); err != nil {
				// A connection we cannot roll back must not go back to the pool.
				_ = conn.Conn().Close(bg)
			}
			if res.Claimed > 0 {
				e.cur.reset() // the released rows may be below the floor by now
			}
		}
	}()

	// One round trip opens the transaction, configures it and claims.
	// idle_in_transaction_session_timeout: if this process stalls (SIGSTOP, a
	// hung broker beyond the publish timeout) PostgreSQL ends the session and
	// frees the rows for another relay. synchronous_commit: the marks need no
	// synchronous commit; if PostgreSQL crashes before flushing them, the rows
	// come back as pending and are published again, which at-least-once
	// delivery allows. Never losing an event rests on the writers' commits,
	// which stay synchronous. This saves a WAL flush per batch.
	idle := strconv.FormatInt((e.cfg.PublishTimeout + 5*time.Second).Milliseconds(), 10)
	sparse := e.cfg.Ordered && e.sparse.Load()
	claim := e.q.Claim
	switch {
	case sparse:
		claim = e.q.ClaimOrderedSparse
	case e.cfg.Ordered:
		claim = e.q.ClaimOrdered
	}
	floor, full := e.cur.next(start)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('synchronous_commit', 'off', true)`, idle)
	lowWater := e.cfg.Ordered && full
	if lowWater {
		b.Queue(e.q.LowWater)
	}
	limit := int(e.limit.Load())
	if sparse {
		b.Queue(claim, limit, floor, int(e.window.Load())*limit)
	} else {
		b.Queue(claim, limit, floor)
	}
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return res, fmt.Errorf("begin: %w", err)
	}
	inTx = true
	if _, err := br.Exec(); err != nil {
		br.Close()
		return res, fmt.Errorf("claim: %w", err)
	}
	if lowWater {
		var low *int64
		if err := br.QueryRow().Scan(&low); err != nil {
			br.Close()
			return res, fmt.Errorf("claim: low water: %w", err)
		}
		// Read in the claim's transaction, before the claim: every row
		// pending then is above the new floor.
		if low != nil {
			e.cur.setLowWater(*low)
		} else {
			e.cur.setLowWater(0)
		}
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return res, fmt.Errorf("claim: %w", err)
	}
	batch, more, err := scanRows(rows, limit)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("claim: %w", err)
	}
	res.Claimed = len(batch)
	e.rate.observe(time.Now(), len(batch))
	// Full: more rows are likely claimable now. An ordered claim can lock a
	// whole batch of rows and keep only the heads among them.
	res.Full = len(batch) == limit || more
	switch {
	case sparse:
		e.adaptWindow(len(batch) == limit)
		e.adaptSparse(batch)
	case e.cfg.Ordered && len(batch) < limit/2 && (more || len(batch) == 0):
		// The dense claim's rows were mostly events waiting behind an
		// earlier one: in flight elsewhere, or failing and not parked yet
		// (a hot aggregate's events arrive faster than the housekeeping
		// parks them). The sparse claim looks past such runs.
		e.sparse.Store(true)
	case e.cfg.Ordered:
		e.adaptSparse(batch)
	}
	if n := len(batch); n > 0 {
		e.cur.claimed(start, batch[n-1].Seq) // the claim returns rows in seq order
	}
	claimedAt := time.Now()
	if len(batch) == 0 {
		_, err := conn.Exec(bg, "COMMIT")
		inTx = err != nil
		return res, err
	}

	errs := e.publishBatch(bg, batch)
	ackedAt := time.Now()
	e.adapt(limit, len(batch), ackedAt.Sub(claimedAt))

	var (
		failIDs    [][16]byte
		failErrs   []string
		failDelays []int64
		failDead   []bool
		okIDs      = make([][16]byte, 0, len(batch)) // [16]byte: pgx's native uuid encoding
	)
	anyOK := false
	for _, err := range errs {
		if err == nil {
			anyOK = true
			break
		}
	}
	var releaseIDs [][16]byte // published events that may hold later ones (ordered mode)
	for i, r := range batch {
		err := errs[i]
		if err == nil {
			okIDs = append(okIDs, r.ID)
			if e.cfg.Ordered && (r.Failed || r.Attempts > 0) {
				releaseIDs = append(releaseIDs, r.ID)
			}
			continue
		}
		if errors.Is(err, errHeldBack) {
			continue // not tried: left untouched, parked if its predecessor failed
		}
		class := e.cfg.Classify(err)
		if r.Bad != nil {
			class = Permanent
		}
		// A batch where nothing was confirmed in time means the broker is not
		// answering, not that every message is bad.
		if class == Transient && !anyOK && e.cfg.IsTimeout(err) {
			class = Unavailable
		}
		log := e.cfg.Logger.With("event_id", r.ID, "event_type", r.EventType,
			"aggregate_type", r.AggregateType, "aggregate_id", r.AggregateID, "attempt", r.Attempts+1)
		switch class {
		case Unavailable:
			res.Unavailable++
			res.UnavailableErr = err
			continue
		case Permanent:
			res.DeadLettered++
			log.Error("publish failed permanently; event dead-lettered", "err", err)
			failDelays = append(failDelays, 0)
			failDead = append(failDead, true)
		default:
			attempt := r.Attempts + 1
			dead := attempt >= e.cfg.MaxAttempts
			delay := e.cfg.RetryBackoff.Delay(attempt)
			if d, ok := e.cfg.RequestedDelay(err); ok && d > delay {
				delay = min(d, maxRequestedDelay)
			}
			if dead {
				res.DeadLettered++
				log.Error("publish failed; max attempts reached, event dead-lettered", "err", err, "max_attempts", e.cfg.MaxAttempts)
			} else {
				res.Retried++
				log.Warn("publish failed; will retry", "err", err, "retry_in", delay)
			}
			failDelays = append(failDelays, delay.Milliseconds())
			failDead = append(failDead, dead)
		}
		msg := truncate(err.Error(), 2000)
		failIDs = append(failIDs, r.ID)
		failErrs = append(failErrs, msg)
		if e.cfg.Metrics != nil {
			e.cfg.Metrics.Failed.WithLabelValues(r.EventType).Inc()
			if failDead[len(failDead)-1] {
				e.cfg.Metrics.DeadLettered.WithLabelValues(r.EventType).Inc()
			}
		}
	}
	e.brokerDown.Store(res.Unavailable > 0)
	if e.cfg.Metrics != nil {
		if res.Unavailable > 0 {
			e.cfg.Metrics.BrokerUnavailable.Set(1)
		} else {
			e.cfg.Metrics.BrokerUnavailable.Set(0)
		}
	}

	if len(failIDs) == 0 && len(okIDs) == 0 {
		// Nothing to record: leave every row untouched for the next try.
		return res, nil // the deferred ROLLBACK releases the locks
	}
	// One round trip records the whole batch in one statement and commits.
	mark := &pgx.Batch{}
	ordered := e.cfg.Ordered && (len(failIDs) > 0 || len(releaseIDs) > 0)
	switch {
	case ordered:
		mark.Queue(e.q.MarkOrdered, okIDs, failIDs, failErrs, failDelays, failDead, releaseIDs)
	case len(failIDs) == 0:
		mark.Queue(e.q.MarkPublished, okIDs)
	default:
		mark.Queue(e.q.MarkOutcomes, okIDs, failIDs, failErrs, failDelays, failDead)
	}
	mark.Queue("COMMIT")
	mr := conn.SendBatch(bg, mark)
	var released int64
	if ordered {
		err = mr.QueryRow().Scan(&released)
	} else {
		_, err = mr.Exec()
	}
	if err != nil {
		mr.Close()
		return res, fmt.Errorf("mark %d event(s): %w", len(batch)-res.Unavailable, err)
	}
	_, err = mr.Exec()
	if cerr := mr.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("commit marks: %w", err)
	}
	inTx = false
	res.Published = len(okIDs)
	if released > 0 {
		// Released events are below the floor: find them now, not at the
		// next rescan.
		e.cur.reset()
	}
	if m := e.cfg.Metrics; m != nil {
		for i, r := range batch {
			if errs[i] == nil {
				m.ObservePublished(r.EventType, r.CreatedAt, ackedAt)
			}
		}
		if len(okIDs) > 0 {
			m.LastPublish.Set(float64(ackedAt.UnixNano()) / 1e9)
		}
		m.BatchDuration.Observe(time.Since(start).Seconds())
	}
	if e.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		for i, r := range batch {
			if errs[i] == nil {
				e.cfg.Logger.Debug("event published", "event_id", r.ID, "event_type", r.EventType,
					"aggregate_id", r.AggregateID, "attempt", r.Attempts+1)
			}
		}
	}
	return res, nil
}

// The sparse ordered claim's window, in multiples of the batch size. The
// window is read on every sparse claim, and the workers that find every
// head taken by another one come back empty and grow it: up to 64 batches,
// those idle claims read 64,000 rows each and took most of both cores from
// the worker doing the work (20 aggregates: 13k events/s against 41k with 8).
// Eight batches still look past a run of 8,000 events of aggregates that
// wait behind a failing event and are not parked yet.
const (
	minWindow = 2
	maxWindow = 8
)

// adaptWindow sizes the sparse ordered claim's window: twice the batch
// size while claims come back full, doubling (up to maxWindow) while they
// do not, so that rows that wait behind an earlier event at the front of
// the queue do not hide the heads behind them.
func (e *Engine) adaptWindow(full bool) {
	w := e.window.Load()
	switch {
	case full && w > minWindow:
		e.window.CompareAndSwap(w, w/2)
	case !full && w < maxWindow:
		e.window.CompareAndSwap(w, w*2)
	}
}

// adaptSparse picks the ordered claim for the next batch from the shape of
// this one: mostly runs (fewer heads than a quarter of the rows) means few
// aggregates hold the queue, and the claim that probes one row per
// aggregate is cheaper; mostly heads (at least half the rows) means many
// aggregates, and the dense claim is (lock the first rows, keep the heads).
func (e *Engine) adaptSparse(batch []*Row) {
	if len(batch) < 8 {
		return // too few rows to tell
	}
	heads := 0
	for _, r := range batch {
		if !r.Follower {
			heads++
		}
	}
	if heads*2 >= len(batch) {
		e.sparse.Store(false)
		return
	}
	if heads*4 < len(batch) {
		e.sparse.Store(true)
	}
}

// adapt keeps batches well inside the publish timeout: a batch of limit
// rows whose publish took more than a quarter of PublishTimeout halves the
// batch size of the claims that follow (a slow webhook endpoint or broker
// then still confirms whole batches instead of timing out and counting
// attempts), and a full batch published in a sixteenth of it doubles the
// size again, up to BatchSize.
func (e *Engine) adapt(limit, claimed int, took time.Duration) {
	switch {
	case took > e.cfg.PublishTimeout/4 && limit > 1:
		next := max(1, limit/2)
		if e.limit.CompareAndSwap(int64(limit), int64(next)) {
			e.cfg.Logger.Info("outbox publishes are slow; claiming smaller batches",
				"batch_size", next, "publish_took", took, "publish_timeout", e.cfg.PublishTimeout)
		}
	case claimed == limit && limit < e.cfg.BatchSize && took < e.cfg.PublishTimeout/16:
		e.limit.CompareAndSwap(int64(limit), int64(min(e.cfg.BatchSize, limit*2)))
	}
}

// scanRows reads a claim's rows: one allocation for all of them, ids as
// [16]byte (pgx's native uuid decoding; uuid.UUID would go through
// sql.Scanner and a text parse), headers decoded only when present. more
// reports a claim that says it stopped at its limit (the last column).
func scanRows(rows pgx.Rows, limit int) (batch []*Row, more bool, err error) {
	backing := make([]Row, 0, limit)
	var (
		id      [16]byte
		headers []byte
		full    bool
	)
	for rows.Next() {
		backing = append(backing, Row{})
		r := &backing[len(backing)-1]
		if err := rows.Scan(&id, &r.Seq, &r.AggregateType, &r.AggregateID, &r.EventType,
			&r.Payload, &headers, &r.CreatedAt, &r.Attempts, &r.Failed, &r.Follower, &full); err != nil {
			rows.Close()
			return nil, false, err
		}
		more = more || full
		r.ID = id
		if headers != nil {
			if err := json.Unmarshal(headers, &r.Headers); err != nil {
				r.Headers = nil
				r.Bad = fmt.Errorf("headers %.200s: want a JSON object of string values: %v", headers, err)
			}
		}
	}
	out := make([]*Row, len(backing))
	for i := range backing {
		out[i] = &backing[i]
	}
	return out, more, rows.Err()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// listenLoop holds a dedicated connection (outside the pool, so it never
// starves the workers) LISTENing for wake-ups, reconnecting with backoff. After
// every (re)connect it wakes a worker, since notifications sent while it was
// away are lost; polling covers the rest.
func (e *Engine) listenLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := e.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		failures++
		wait := e.cfg.OutageBackoff.Delay(failures)
		e.cfg.Logger.Warn("outbox listener lost; polling until it reconnects", "err", err, "retry_in", wait)
		if !e.sleep(ctx, wait, false) {
			return
		}
	}
}

func (e *Engine) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+ident.Quote(e.cfg.Names.Channel)); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	e.Wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		e.Wake()
	}
}

// statsLoop refreshes the gauges and looks after held events every
// StatsInterval.
func (e *Engine) statsLoop(ctx context.Context) {
	if e.cfg.StatsInterval <= 0 {
		return
	}
	t := time.NewTicker(e.cfg.StatsInterval)
	defer t.Stop()
	for {
		if err := e.tendHeld(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("outbox held events housekeeping failed", "err", err)
		}
		if e.cfg.Metrics != nil {
			if err := e.refreshGauges(ctx); err != nil && ctx.Err() == nil {
				e.cfg.Logger.Warn("outbox gauges refresh failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tendHeld parks, in ordered mode, the events that arrived behind a failing
// event after it failed, so claims never step over them; releases events
// whose holder is gone (deleted by hand); and, when the relay is not
// ordered, releases every held event (the table was relayed in ordered mode
// before).
func (e *Engine) tendHeld(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue(e.q.ReleaseOrphans)
	if e.cfg.Ordered {
		b.Queue(e.q.ParkLate)
	} else {
		b.Queue(e.q.ReleaseAll)
	}
	br := e.pool.SendBatch(ctx, b)
	defer br.Close()
	var released int64
	for i := range 2 {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if i == 0 || !e.cfg.Ordered {
			released += tag.RowsAffected()
		}
	}
	if released > 0 {
		e.cur.reset()
		e.cfg.Logger.Info("outbox released held events", "events", released)
	}
	return nil
}

func (e *Engine) refreshGauges(ctx context.Context) error {
	var pending, dead, held, blocked int64
	b := &pgx.Batch{}
	b.Queue(e.q.CountPending).QueryRow(func(r pgx.Row) error { return r.Scan(&pending) })
	b.Queue(e.q.CountDead).QueryRow(func(r pgx.Row) error { return r.Scan(&dead) })
	b.Queue(e.q.CountHeld).QueryRow(func(r pgx.Row) error { return r.Scan(&held) })
	var oldest, now time.Time
	b.Queue(`SELECT now()`).QueryRow(func(r pgx.Row) error { return r.Scan(&now) })
	b.Queue(e.q.OldestPending).QueryRow(func(r pgx.Row) error {
		if err := r.Scan(&oldest); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	})
	if e.cfg.Ordered {
		b.Queue(e.q.BlockedAggregates).QueryRow(func(r pgx.Row) error { return r.Scan(&blocked) })
	}
	if err := e.pool.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	e.cfg.Metrics.Pending.Set(float64(pending))
	e.cfg.Metrics.DeadLetters.Set(float64(dead))
	e.cfg.Metrics.HeldEvents.Set(float64(held))
	e.cfg.Metrics.BlockedAggregates.Set(float64(blocked))
	age := 0.0
	if !oldest.IsZero() {
		age = max(now.Sub(oldest).Seconds(), 0)
	}
	e.cfg.Metrics.OldestPendingAge.Set(age)
	return nil
}

func (e *Engine) cleanupLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.CleanupInterval)
	defer t.Stop()
	for {
		n, err := e.Cleanup(ctx, e.cfg.Retention, e.cfg.CleanupBatch, nil)
		switch {
		case err != nil && ctx.Err() == nil:
			e.cfg.Logger.Warn("outbox cleanup failed", "err", err, "deleted", n)
		case n > 0:
			e.cfg.Logger.Info("outbox cleanup", "deleted", n, "retention", e.cfg.Retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Cleanup deletes rows processed more than olderThan ago (by the database's
// clock), batchSize rows per statement
// (each its own short transaction, so no multi-minute DELETE holds locks or
// bloats WAL in one go). progress, if set, is called after every batch with
// the running total. It returns how many rows it deleted.
func (e *Engine) Cleanup(ctx context.Context, olderThan time.Duration, batchSize int, progress func(deleted int64)) (int64, error) {
	return Cleanup(ctx, e.pool, e.q, olderThan, batchSize, progress)
}

// Cleanup is Engine.Cleanup without an engine, for the admin functions.
func Cleanup(ctx context.Context, pool *pgxpool.Pool, q *store.Queries, olderThan time.Duration, batchSize int, progress func(deleted int64)) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, q.Cleanup, olderThan, batchSize)
		if err != nil {
			return total, fmt.Errorf("cleanup: %w", err)
		}
		total += tag.RowsAffected()
		if progress != nil {
			progress(total)
		}
		if tag.RowsAffected() < int64(batchSize) {
			return total, nil
		}
	}
}

// IsUndefined reports whether err says a table or column is missing.
func IsUndefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703")
}
