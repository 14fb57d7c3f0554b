package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

// ReplayMode is what consumers see of a replayed event's identity.
type ReplayMode string

const (
	// ReplaySameID re-sends each event under its original id: a consumer
	// whose inbox already recorded it skips it, a new consumer (or an
	// emptied inbox) processes it. A broker that deduplicates by message id
	// (JetStream's duplicate window, SQS FIFO's five minutes) drops a
	// re-send within its window. The original row is moved to the archive
	// table, since the outbox table's primary key holds one row per id.
	ReplaySameID ReplayMode = "same-id"
	// ReplayNewID sends a copy under a fresh id, with outbox.HeaderReplayOf
	// (the original id) and outbox.HeaderReplayID: every consumer processes
	// it again, on purpose, and can tell it is a replay.
	ReplayNewID ReplayMode = "new-id"
)

// Replay defaults.
const (
	// DefaultReplayBatch is how many copies one replay transaction inserts.
	DefaultReplayBatch = 1000
	// DefaultReplayLockTimeout bounds the wait for the outbox table's lock
	// by one replay batch; on timeout the batch is tried again.
	DefaultReplayLockTimeout = 200 * time.Millisecond
	// DefaultReplaySample is how many events a dry run returns.
	DefaultReplaySample = 10
)

// ReplaySelector says which delivered events Replay re-queues, and how. The
// filters combine (AND); at least one, or All, is required. Events are read
// from the outbox table (published rows still kept) and from the archive;
// copies queued by earlier replays are never selected again (their originals
// are).
type ReplaySelector struct {
	// IDs selects these events.
	IDs []uuid.UUID `json:"ids,omitempty"`
	// EventType, AggregateType and AggregateID select by exact value.
	EventType     string `json:"event_type,omitempty"`
	AggregateType string `json:"aggregate_type,omitempty"`
	AggregateID   string `json:"aggregate_id,omitempty"`
	// Since and Until select events written (created_at) in [Since, Until).
	// Zero: unbounded.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// All selects every delivered event (with the filters above if set).
	All bool `json:"all,omitempty"`
	// Mode is required: ReplaySameID or ReplayNewID.
	Mode ReplayMode `json:"mode"`
	// DryRun counts the selected events and returns a sample without
	// changing anything.
	DryRun bool `json:"-"`
	// Sample is how many events a dry run returns. Defaults to
	// DefaultReplaySample (10).
	Sample int `json:"-"`
	// Rate paces the replay to about this many events per second (whole
	// aggregates per batch, so a batch may exceed it). Defaults to 0: no
	// pacing.
	Rate float64 `json:"rate,omitempty"`
	// BatchSize is how many copies one transaction inserts (whole
	// aggregates: an aggregate's copies are never split). Defaults to
	// DefaultReplayBatch (1000).
	BatchSize int `json:"-"`
	// LockTimeout bounds each batch's wait for the table lock. Defaults to
	// DefaultReplayLockTimeout (200ms).
	LockTimeout time.Duration `json:"-"`
	// Progress, if set, is called after each batch with the copies queued
	// so far.
	Progress func(queued int64) `json:"-"`
}

// ReplayResult says what Replay did.
type ReplayResult struct {
	// ID is the replay's id (zero for a dry run): `outbox replay list`
	// shows it, ReplayCancel takes it, and outbox.HeaderReplayID carries it.
	ID uuid.UUID `json:"id"`
	// Selected counts the events the selector matched.
	Selected int64 `json:"selected"`
	// Queued counts the copies queued for the relays.
	Queued int64 `json:"queued"`
	// Skipped counts selected events not queued: a same-id copy of the
	// event already pending, or an event archived or cleaned up meanwhile.
	Skipped int64 `json:"skipped"`
	// Cancelled says the replay was cancelled while it was queuing.
	Cancelled bool `json:"cancelled"`
	// Sample holds the first selected events, in seq order (dry run only).
	Sample []outbox.Record `json:"-"`
}

// ErrReplayNotFound is returned for a replay id that is not in the replays
// table.
var ErrReplayNotFound = errors.New("no such replay")

func (sel *ReplaySelector) check() error {
	bad := func(field, format string, args ...any) error {
		return &outbox.ConfigError{Config: "admin.ReplaySelector", Field: field, Err: fmt.Errorf(format, args...)}
	}
	filter := len(sel.IDs) > 0 || sel.EventType != "" || sel.AggregateType != "" || sel.AggregateID != "" ||
		!sel.Since.IsZero() || !sel.Until.IsZero()
	switch {
	case sel.Mode != ReplaySameID && sel.Mode != ReplayNewID:
		return bad("Mode", "%q: want %q (consumers that processed an event skip it) or %q (a fresh id: every consumer processes it again)", sel.Mode, ReplaySameID, ReplayNewID)
	case !filter && !sel.All:
		return bad("All", "set IDs, EventType, AggregateType, AggregateID, Since or Until, or All to replay every delivered event")
	case !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Until.After(sel.Since):
		return bad("Until", "%s is not after Since %s", sel.Until.Format(time.RFC3339), sel.Since.Format(time.RFC3339))
	case sel.Rate < 0:
		return bad("Rate", "%g must not be negative", sel.Rate)
	case sel.BatchSize < 0:
		return bad("BatchSize", "%d must not be negative", sel.BatchSize)
	case sel.Sample < 0:
		return bad("Sample", "%d must not be negative", sel.Sample)
	case sel.LockTimeout < 0:
		return bad("LockTimeout", "%s must not be negative", sel.LockTimeout)
	}
	sel.BatchSize = cmp.Or(sel.BatchSize, DefaultReplayBatch)
	sel.Sample = cmp.Or(sel.Sample, DefaultReplaySample)
	sel.LockTimeout = cmp.Or(sel.LockTimeout, DefaultReplayLockTimeout)
	if sel.Rate > 0 && float64(sel.BatchSize) > sel.Rate {
		sel.BatchSize = max(1, int(sel.Rate))
	}
	return nil
}

func (sel *ReplaySelector) args() []any {
	var ids []uuid.UUID
	if len(sel.IDs) > 0 {
		ids = sel.IDs
	}
	t := func(v time.Time) *time.Time {
		if v.IsZero() {
			return nil
		}
		return &v
	}
	return []any{uuidArgs(ids), sel.EventType, sel.AggregateType, sel.AggregateID, t(sel.Since), t(sel.Until)}
}

func (a *Admin) replayQueries() (*store.ReplayQueries, error) {
	rq, err := store.NewReplay(a.names, false)
	if err != nil {
		return nil, ident.ConfigErr("admin.Config", err)
	}
	return rq, nil
}

// Replay re-queues delivered events for the running relays to publish again,
// as copies inserted at the tail of the outbox table in their original order.
//
// The ordering guarantee, per aggregate, with an ordered relay
// (outbox.RelayConfig.Ordered): the consumer receives the aggregate's events
// that were pending when a batch of the replay committed, then the replayed
// events in their original order, then the events written after; replayed
// and live events are never interleaved or inverted. It rests on three
// things: each batch holds whole aggregates (an aggregate's copies are
// inserted in one transaction, in seq order); each batch first locks the
// table against inserts (SHARE ROW EXCLUSIVE, waiting at most LockTimeout,
// then retrying), so its copies get consecutive seqs and every transaction
// that inserted before it has committed; and the ordered relay publishes an
// aggregate's events in seq order. Writers and relays' marks wait for the
// lock while a batch inserts (milliseconds for a batch of 1,000). An
// unordered relay publishes the copies in seq order but concurrently, like
// any events. A dead letter or held event of the aggregate holds its copies
// back, as it holds live events.
//
// Replay returns once every batch is queued (paced by Rate), not once the
// copies are delivered; ReplayList follows them. Cancelling ctx stops the
// queuing; ReplayCancel removes the copies not yet delivered.
func (a *Admin) Replay(ctx context.Context, sel ReplaySelector) (ReplayResult, error) {
	if err := sel.check(); err != nil {
		return ReplayResult{}, err
	}
	rq, err := a.replayQueries()
	if err != nil {
		return ReplayResult{}, err
	}
	args := sel.args()
	var res ReplayResult
	if sel.DryRun {
		return a.replayDryRun(ctx, rq, args, sel.Sample)
	}

	batches, selected, err := a.replayBatches(ctx, rq, args, sel.BatchSize)
	if err != nil {
		return res, err
	}
	res.Selected = selected
	if res.ID, err = uuid.NewV7(); err != nil {
		return res, fmt.Errorf("outbox: replay: %w", err)
	}
	selector, err := json.Marshal(sel)
	if err != nil {
		return res, fmt.Errorf("outbox: replay: %w", err)
	}
	cctx, cancel := a.bound(ctx)
	defer cancel()
	// The selector as text: the exec modes would send []byte as bytea.
	if _, err := a.pool.Exec(cctx, rq.Create, res.ID, string(sel.Mode), string(selector), selected); err != nil {
		return res, a.fail(cctx, "replay", err)
	}
	err = a.queueReplay(ctx, rq, &sel, batches, &res)
	state, msg := "queued", ""
	switch {
	case res.Cancelled:
		state = "" // ReplayCancel set it
	case err != nil:
		state, msg = "failed", err.Error()
	}
	if state != "" {
		// Recorded even when ctx is cancelled: the row must not stay
		// "queuing" for ever.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, ferr := a.pool.Exec(fctx, rq.Finish, res.ID, state, msg); ferr != nil && err == nil {
			err = ferr
		}
	}
	if err != nil {
		return res, a.wrap(fmt.Sprintf("replay %s (queued %d of %d)", res.ID, res.Queued, res.Selected), err)
	}
	return res, nil
}

// replayDryRun counts the selected events and reads the first sample of them.
func (a *Admin) replayDryRun(ctx context.Context, rq *store.ReplayQueries, args []any, sample int) (ReplayResult, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var res ReplayResult
	if err := a.pool.QueryRow(ctx, rq.Count, args...).Scan(&res.Selected); err != nil {
		return res, a.fail(ctx, "replay", err)
	}
	rows, err := a.pool.Query(ctx, rq.Sample, append(args, sample)...)
	if err != nil {
		return res, a.fail(ctx, "replay", err)
	}
	res.Sample, err = collect(rows, func(r *outbox.Record) []any {
		return []any{&r.ID, &r.Seq, &r.AggregateType, &r.AggregateID, &r.EventType,
			&r.Payload, headerScanner{&r.Headers}, &r.CreatedAt, &r.ProcessedAt}
	})
	if err != nil {
		return res, a.fail(ctx, "replay", err)
	}
	return res, nil
}

// replayBatches reads the selected event ids, grouped by aggregate, and cuts
// them into batches of about size ids that never split an aggregate.
func (a *Admin) replayBatches(ctx context.Context, rq *store.ReplayQueries, args []any, size int) (_ [][]uuid.UUID, _ int64, err error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	defer func() {
		if err != nil {
			err = a.fail(ctx, "replay", err)
		}
	}()
	rows, err := a.pool.Query(ctx, rq.Select, args...)
	if err != nil {
		return nil, 0, err
	}
	var (
		batches        [][]uuid.UUID
		cur            []uuid.UUID
		id             uuid.UUID
		seq            int64
		aggType, aggID string
		lastT, lastID  string
		n              int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &seq, &aggType, &aggID}, func() error {
		if n > 0 && (aggType != lastT || aggID != lastID) && len(cur) >= size {
			batches, cur = append(batches, cur), nil
		}
		cur = append(cur, id)
		lastT, lastID = aggType, aggID
		n++
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches, n, nil
}

// queueReplay inserts the batches, paced by sel.Rate, stopping when the
// replay is cancelled.
func (a *Admin) queueReplay(ctx context.Context, rq *store.ReplayQueries, sel *ReplaySelector, batches [][]uuid.UUID, res *ReplayResult) error {
	start := time.Now()
	for _, ids := range batches {
		n, cancelled, err := a.replayBatch(ctx, rq, sel, res.ID, ids)
		if err != nil {
			return err
		}
		if cancelled {
			res.Cancelled = true
			return nil
		}
		res.Queued += n
		res.Skipped += int64(len(ids)) - n
		if sel.Progress != nil {
			sel.Progress(res.Queued)
		}
		if sel.Rate > 0 {
			due := start.Add(time.Duration(float64(res.Queued+res.Skipped) / sel.Rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
				}
			}
		}
	}
	return nil
}

// replayBatch queues one batch in one transaction, trying again when the
// table lock is not granted within sel.LockTimeout.
func (a *Admin) replayBatch(ctx context.Context, rq *store.ReplayQueries, sel *ReplaySelector, replayID uuid.UUID, ids []uuid.UUID) (queued int64, cancelled bool, err error) {
	newIDs := ids
	if sel.Mode == ReplayNewID {
		newIDs = make([]uuid.UUID, len(ids))
		for i := range newIDs {
			// UUIDv7, as the Writer's: time-ordered, so the copies land
			// next to each other in the primary-key index.
			if newIDs[i], err = uuid.NewV7(); err != nil {
				return 0, false, fmt.Errorf("outbox: generate event id: %w", err)
			}
		}
	}
	wait := 50 * time.Millisecond
	const replayLockTries = 30 // about a minute of backoff at most
	for attempt := 1; ; attempt++ {
		queued, cancelled, err = a.replayTx(ctx, rq, sel, replayID, ids, newIDs)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55P03" || attempt == replayLockTries {
			return queued, cancelled, err
		}
		// lock_not_available: a long writer transaction holds the table;
		// let the writers queued behind this batch's lock request through.
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (a *Admin) replayTx(ctx context.Context, rq *store.ReplayQueries, sel *ReplaySelector, replayID uuid.UUID, ids, newIDs []uuid.UUID) (queued int64, cancelled bool, err error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	defer func() { err = a.timedOut(ctx, "replay", err) }()
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var state string
		if err := tx.QueryRow(ctx, rq.State, replayID).Scan(&state); err != nil {
			return err
		}
		if state == "cancelled" {
			cancelled = true
			return nil
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprint(sel.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, rq.Lock); err != nil {
			return err
		}
		if sel.Mode == ReplaySameID {
			if _, err := tx.Exec(ctx, rq.MoveOriginals, uuidArgs(ids)); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, rq.InsertCopies, uuidArgs(ids), uuidArgs(newIDs), replayID, sel.Mode == ReplayNewID)
		if err != nil {
			return err
		}
		queued = tag.RowsAffected()
		_, err = tx.Exec(ctx, rq.Progress, replayID, queued, int64(len(ids))-queued)
		return err
	})
	return queued, cancelled, err
}

// ReplayInfo is one replay as ReplayList shows it.
type ReplayInfo struct {
	ID        uuid.UUID       `json:"id"`
	Mode      ReplayMode      `json:"mode"`
	Selector  json.RawMessage `json:"selector"`
	Selected  int64           `json:"selected"`
	Queued    int64           `json:"queued"`
	Skipped   int64           `json:"skipped"`
	Cancelled int64           `json:"cancelled"` // copies removed by ReplayCancel
	// State is queuing (Replay is inserting copies), queued (all inserted,
	// some pending), done (all inserted and none pending), cancelled or
	// failed (Error says why).
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Pending counts copies not yet delivered; Delivered those delivered
	// and still kept (in the outbox table or the archive).
	Pending    int64      `json:"pending"`
	Delivered  int64      `json:"delivered"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// ReplayList lists the last limit replays (default 20), newest first.
func (a *Admin) ReplayList(ctx context.Context, limit int) ([]ReplayInfo, error) {
	if limit <= 0 {
		limit = 20
	}
	return a.replays(ctx, limit, nil)
}

func (a *Admin) replays(ctx context.Context, limit int, id *uuid.UUID) ([]ReplayInfo, error) {
	rq, err := a.replayQueries()
	if err != nil {
		return nil, err
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	rows, err := a.pool.Query(ctx, rq.List, limit, id)
	if err != nil {
		return nil, a.fail(ctx, "replay list", err)
	}
	type replayRow struct {
		ReplayInfo
		mode     string
		selector []byte
	}
	rs, err := collect(rows, func(r *replayRow) []any {
		return []any{&r.ID, &r.mode, &r.selector, &r.Selected, &r.Queued, &r.Skipped, &r.Cancelled,
			&r.State, &r.Error, &r.CreatedAt, &r.FinishedAt, &r.Pending, &r.Delivered}
	})
	if err != nil {
		return nil, a.fail(ctx, "replay list", err)
	}
	out := make([]ReplayInfo, len(rs))
	for i, r := range rs {
		out[i] = r.ReplayInfo
		out[i].Mode, out[i].Selector = ReplayMode(r.mode), json.RawMessage(r.selector)
		if out[i].State == "queued" && out[i].Pending == 0 {
			out[i].State = "done"
		}
	}
	return out, nil
}

// ReplayCancelResult says what ReplayCancel did.
type ReplayCancelResult struct {
	// Removed counts the copies deleted before they were delivered.
	Removed int64 `json:"removed"`
	// Released counts events a removed copy held back (ordered mode).
	Released int64 `json:"released"`
	// Delivered counts the copies already delivered (not undone).
	Delivered int64 `json:"delivered"`
	// AlreadyFinished says the replay had finished (all its copies
	// delivered, or it failed with none pending): nothing was changed, and
	// it keeps its state.
	AlreadyFinished bool `json:"already_finished"`
}

// ReplayCancel cancels replay id: it stops the queuing if Replay is still
// inserting copies (at its next batch), and deletes the copies not yet
// delivered, releasing what they held in ordered mode. A copy a relay is
// publishing at that moment is waited for, and counts as delivered if the
// broker confirmed it. The originals are untouched (a same-id replay's
// originals stay in the archive). Cancelling twice is harmless. A replay
// that had finished, with no copy pending, is left as it was (its state
// stays done or failed) and AlreadyFinished says so.
func (a *Admin) ReplayCancel(ctx context.Context, id uuid.UUID) (ReplayCancelResult, error) {
	var res ReplayCancelResult
	bctx, cancel := a.bound(ctx)
	defer cancel()
	_, rq, err := a.deleting(bctx)
	if err != nil {
		return res, a.fail(bctx, "replay cancel", err)
	}
	err = pgx.BeginFunc(bctx, a.pool, func(tx pgx.Tx) error {
		var state string
		if err := tx.QueryRow(bctx, rq.State, id).Scan(&state); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%s: %w", id, ErrReplayNotFound)
			}
			return err
		}
		if state != "queuing" && state != "cancelled" {
			// Queued or failed: cancelling only makes sense while copies wait.
			var pending bool
			if err := tx.QueryRow(bctx, rq.HasPending, id).Scan(&pending); err != nil {
				return err
			}
			if !pending {
				res.AlreadyFinished = true
				return nil
			}
		}
		if err := tx.QueryRow(bctx, rq.Cancel, id).Scan(new(uuid.UUID)); err != nil {
			return err
		}
		return tx.QueryRow(bctx, rq.CancelCopies, id).Scan(&res.Removed, &res.Released)
	})
	if err != nil {
		return res, a.fail(bctx, "replay cancel", err)
	}
	info, err := a.replays(ctx, 1, &id)
	if err != nil {
		return res, err
	}
	if len(info) == 1 {
		res.Delivered = info[0].Delivered
	}
	return res, nil
}

// ReplayTotals counts replayed rows in the outbox table.
type ReplayTotals struct {
	// Pending counts copies not yet delivered (they are in Status.Pending
	// too); Delivered those delivered and still in the outbox table.
	Pending   int64 `json:"pending"`
	Delivered int64 `json:"delivered"`
	// Active counts replays with copies pending.
	Active int64 `json:"active"`
}

// ReplayTotals reads the replayed rows' counts, for status pages and
// metrics. On a table not migrated to version 5 it returns
// outbox.ErrNotMigrated.
func (a *Admin) ReplayTotals(ctx context.Context) (ReplayTotals, error) {
	rq, err := a.replayQueries()
	if err != nil {
		return ReplayTotals{}, err
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var t ReplayTotals
	if err := a.pool.QueryRow(ctx, rq.Totals).Scan(&t.Pending, &t.Delivered, &t.Active); err != nil {
		return t, a.fail(ctx, "replay totals", err)
	}
	return t, nil
}

// ReplayCollector returns a Prometheus collector of the replayed rows, read
// by one query per scrape (bounded by a 5s timeout): the gauges
// outbox_replayed_events{state="pending"|"delivered"} (copies in the outbox
// table not yet delivered, and delivered but not yet cleaned up or
// archived) and outbox_replays_active (replays with copies pending).
// constLabels are added to every series, as outbox.RelayConfig.MetricLabels.
// The relay's own counters (outbox_events_published_total and the others)
// count replayed events with live ones. A failed query fails the scrape's
// collection with its error (Gather returns it).
func (a *Admin) ReplayCollector(constLabels prometheus.Labels) prometheus.Collector {
	return &replayCollector{a: a,
		events: prometheus.NewDesc("outbox_replayed_events",
			"Replayed outbox events in the outbox table, by state (pending, delivered).", []string{"state"}, constLabels),
		active: prometheus.NewDesc("outbox_replays_active",
			"Replays with copies not yet delivered.", nil, constLabels),
	}
}

type replayCollector struct {
	a              *Admin
	events, active *prometheus.Desc
}

func (c *replayCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.events; ch <- c.active }

func (c *replayCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t, err := c.a.ReplayTotals(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.events, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(t.Pending), "pending")
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(t.Delivered), "delivered")
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(t.Active))
}
