package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/engine"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/internal/wal"
)

// DefaultStatementTimeout bounds each Admin call when
// Config.StatementTimeout is zero and the pool sets no statement_timeout.
const DefaultStatementTimeout = 30 * time.Second

// timeoutGrace is what an Admin call waits beyond the server's own
// statement_timeout, so the server's clean cancellation wins when the server
// is there to send it.
const timeoutGrace = 5 * time.Second

// Config names the outbox table, as in outbox.WriterConfig, and bounds the
// statements an Admin runs.
type Config struct {
	Schema string
	Table  string
	// StatementTimeout bounds each Admin call (each batch, for Cleanup): past
	// it the call returns an error naming the database and the operation,
	// and the connection is dropped, instead of waiting for a server that
	// stopped answering (a dead host or a partition is otherwise only
	// noticed by the kernel, minutes later; see outbox.SetTCPTimeouts). A
	// deadline on the caller's ctx still applies. Negative means no bound
	// beyond ctx.
	// Defaults to DefaultStatementTimeout (30s), or, when the pool's
	// connections set statement_timeout (a run-time parameter in the
	// connection string), that plus 5s.
	StatementTimeout time.Duration
	// StuckAfter is how long events may be due before Status reports them
	// Waiting. Defaults to outbox.DefaultStuckAfter (1m), the relay's default.
	StuckAfter time.Duration
}

// Waiting is Status's account of events due for too long.
type Waiting struct {
	Due          int64         `json:"due"`
	OldestDueAge time.Duration `json:"oldest_due_age_ns"`
	// Causes are what the database shows that can hold the relays (a
	// transaction holding the xmin horizon, the WAL source's slot not
	// streamed); empty when it shows none: the relay's /readyz and log
	// name the others (the destination refusing everything, failing
	// batches).
	Causes []string `json:"causes"`
}

// StatementTimeoutError is returned by an Admin call that outlived
// Config.StatementTimeout. errors.Is(err, context.DeadlineExceeded)
// holds.
type StatementTimeoutError struct {
	Op       string        // the Admin operation ("status", "retry", ...)
	Database string        // host:port/database
	Timeout  time.Duration // the bound that was exceeded
	Err      error         // the driver's error
}

func (e *StatementTimeoutError) Error() string {
	return fmt.Sprintf("outbox: %s: no answer from the database %s within %s (admin.Config.StatementTimeout); the connection was dropped: %v",
		e.Op, e.Database, e.Timeout, e.Err)
}

func (e *StatementTimeoutError) Unwrap() []error { return []error{e.Err, context.DeadlineExceeded} }

// errDeadline is the cause of an Admin call's own deadline, told apart
// from the caller's.
var errDeadline = errors.New("admin: statement deadline")

// Admin is the operator's side of the outbox: status, dead letters,
// manual retry and discard, cleanup. The `outbox` command is built on it;
// an application can expose the same operations on its own admin endpoints.
type Admin struct {
	pool    *pgxpool.Pool
	names   ident.Names
	q       *store.Queries
	aq      *store.AdminQueries
	timeout time.Duration // <= 0: none
	// migrated9: the table has the cancellations table (migration 9),
	// which deletions of unpublished events update for WAL relays; found
	// once, at the first deletion.
	migrated9  atomic.Bool
	stuckAfter time.Duration
}

// New validates cfg and returns an Admin.
func New(pool *pgxpool.Pool, cfg Config) (*Admin, error) {
	if pool == nil {
		return nil, errors.New("admin: New: pool is nil")
	}
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, ident.ConfigErr("admin.Config", err)
	}
	timeout := cmp.Or(cfg.StatementTimeout, defaultTimeout(pool.Config()))
	if cfg.StuckAfter < 0 {
		return nil, &outbox.ConfigError{Config: "admin.Config", Field: "StuckAfter", Err: fmt.Errorf("%s: must not be negative", cfg.StuckAfter)}
	}
	return &Admin{pool: pool, names: n, q: store.New(n, false), aq: store.NewAdmin(n, false), timeout: timeout,
		stuckAfter: cmp.Or(cfg.StuckAfter, outbox.DefaultStuckAfter)}, nil
}

// deleting returns the statements for deleting unpublished events: with
// the cancellations table raised in the same transaction once the table is
// migrated to 9 (so a WAL relay does not publish them from the WAL), and
// without it on an older table, which no WAL relay streams.
func (a *Admin) deleting(ctx context.Context) (*store.AdminQueries, *store.ReplayQueries, error) {
	if !a.migrated9.Load() {
		var ok bool
		if err := a.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, a.q.Cancels).Scan(&ok); err != nil {
			return nil, nil, err
		}
		a.migrated9.Store(ok)
	}
	m := a.migrated9.Load()
	rq, err := store.NewReplay(a.names, m)
	if err != nil {
		return nil, nil, ident.ConfigErr("admin.Config", err)
	}
	return store.NewAdmin(a.names, m), rq, nil
}

// defaultTimeout is Config.StatementTimeout's default for pool.
func defaultTimeout(cfg *pgxpool.Config) time.Duration {
	if v, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return time.Duration(ms)*time.Millisecond + timeoutGrace
		}
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d + timeoutGrace
		}
	}
	return DefaultStatementTimeout
}

// bound returns ctx with the call's statement deadline.
func (a *Admin) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, a.timeout, errDeadline)
}

// boundPerBatch is bound for a call made of batches (Cleanup, Archive): the
// deadline restarts at each batch, which the call reports through the
// returned progress (wrapping progress, which may be nil). A long run is
// fine; a batch that never answers is not. stop releases the timer.
func (a *Admin) boundPerBatch(ctx context.Context, progress func(int64)) (_ context.Context, each func(int64), stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if a.timeout <= 0 {
		return ctx, progress, func() { cancel(nil) }
	}
	timer := time.AfterFunc(a.timeout, func() { cancel(errDeadline) })
	each = func(n int64) {
		timer.Reset(a.timeout)
		if progress != nil {
			progress(n)
		}
	}
	return ctx, each, func() { timer.Stop(); cancel(nil) }
}

// fail is wrap for a call bounded by bound: past the statement deadline it
// says so, naming the database.
func (a *Admin) fail(ctx context.Context, op string, err error) error {
	if context.Cause(ctx) == errDeadline {
		cc := a.pool.Config().ConnConfig
		return &StatementTimeoutError{
			Op: op, Database: fmt.Sprintf("%s/%s", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), cc.Database),
			Timeout: a.timeout, Err: err,
		}
	}
	return a.wrap(op, err)
}

// collect reads every row of rows into a T, each row starting from a zero T
// (a map field is never merged into the previous row's); fields returns the
// scan destinations in v, in the query's column order.
func collect[T any](rows pgx.Rows, fields func(v *T) []any) ([]T, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) {
		var v T
		err := row.Scan(fields(&v)...)
		return v, err
	})
}

// timedOut returns err as a *StatementTimeoutError when ctx (from bound)
// passed its statement deadline, else err unchanged: for steps whose errors
// the caller wraps itself.
func (a *Admin) timedOut(ctx context.Context, op string, err error) error {
	if err != nil && context.Cause(ctx) == errDeadline {
		return a.fail(ctx, op, err)
	}
	return err
}

// Table returns the quoted, qualified outbox table name.
func (a *Admin) Table() string { return a.names.QTable }

// unstorable reports whether err is the database refusing a value of a
// lookup that its encoding cannot hold (a LATIN1 database asked for "Ω"):
// no row can hold it, so the lookup finds nothing.
func unstorable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "22P05" || pe.Code == "22021")
}

func (a *Admin) wrap(op string, err error) error {
	if engine.IsUndefined(err) {
		if ferr := store.ForeignTable(context.Background(), a.pool, a.names); ferr != nil {
			return ferr
		}
		return fmt.Errorf("outbox: %s: table %s: %w (run `outbox migrate`): %v", op, a.names.QTable, outbox.ErrNotMigrated, err)
	}
	return fmt.Errorf("outbox: %s: %w", op, explainPrivilege(a.pool, a.names, jobOf(a.names, op), err))
}

// TypeStatus is the state of one event type.
type TypeStatus struct {
	EventType           string        `json:"event_type"`
	Pending             int64         `json:"pending"`
	DeadLetters         int64         `json:"dead_letters"`
	Held                int64         `json:"held"`
	PublishedLastMinute int64         `json:"published_last_minute"`
	PublishedLastHour   int64         `json:"published_last_hour"`
	OldestPendingAge    time.Duration `json:"-"`
	// OldestPendingAgeSeconds is OldestPendingAge in seconds, for JSON.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// Status is the state of the outbox: totals and one line per event type.
type Status struct {
	Pending          int64         `json:"pending"`
	OldestPendingAge time.Duration `json:"-"`
	// OldestPendingAgeSeconds is OldestPendingAge in seconds, for JSON.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	DeadLetters             int64   `json:"dead_letters"`
	// Held counts events parked behind an earlier failing event of their
	// aggregate (ordered mode): they go out once it is published.
	Held                int64 `json:"held"`
	PublishedLastMinute int64 `json:"published_last_minute"`
	PublishedLastHour   int64 `json:"published_last_hour"`
	// BlockedAggregates counts aggregates with a dead letter and later
	// events behind it; in ordered mode those events are held until the
	// dead letter is re-queued and published.
	BlockedAggregates int64 `json:"blocked_aggregates"`
	// Scheduled counts events written with a later delivery time
	// (outbox.Event.DeliverAt or Delay) and not yet due; NextDue is the
	// earliest of their times (nil if none). They are not counted in
	// Pending.
	Scheduled int64        `json:"scheduled"`
	NextDue   *time.Time   `json:"next_due,omitempty"`
	ByType    []TypeStatus `json:"by_type"`
	// Waiting is set when events have been due (pending, not scheduled,
	// retry due) for Config.StuckAfter or longer: the relays are stuck or
	// far behind. Its causes are those the database shows.
	Waiting *Waiting `json:"waiting,omitempty"`
}

// waiting reads how long events have been due, and, past StuckAfter, what
// the database shows that can hold the relays.
func (a *Admin) waiting(ctx context.Context) (*Waiting, error) {
	var due int64
	var oldest *time.Time
	var now time.Time
	if err := a.pool.QueryRow(ctx, a.q.Due).Scan(&due, &oldest, &now); err != nil {
		return nil, err
	}
	if due == 0 || oldest == nil || now.Sub(*oldest) < a.stuckAfter {
		return nil, nil
	}
	w := &Waiting{Due: due, OldestDueAge: now.Sub(*oldest), Causes: []string{}}
	var pid int
	var app, state string
	var age time.Duration
	err := a.pool.QueryRow(ctx, a.q.OldestXmin).Scan(&pid, &app, &state, &age)
	switch {
	case err == nil && age >= a.stuckAfter:
		w.Causes = append(w.Causes, fmt.Sprintf("a transaction open for %s (pid %d, application %q, %s) holds the xmin horizon", age.Round(time.Second), pid, app, state))
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	n, err := wal.Resolve(ctx, a.pool, a.names)
	if err != nil {
		return nil, err
	}
	slot, err := wal.Inspect(ctx, a.pool, n)
	if err != nil {
		return nil, err
	}
	switch {
	case slot.Exists && slot.WALStatus == "lost":
		w.Causes = append(w.Causes, "the WAL source's slot "+n.Slot+" was invalidated (wal_status lost)")
	case slot.Exists && !slot.Active:
		w.Causes = append(w.Causes, "no relay streams the WAL source's slot "+n.Slot)
	}
	return w, nil
}

// Status reads the outbox's state.
func (a *Admin) Status(ctx context.Context) (*Status, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var now time.Time
	if err := a.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, a.fail(ctx, "status", err)
	}
	// Before the rows are opened: with them open a second statement needs
	// a second connection, and a pool of one would wait forever.
	st := &Status{ByType: []TypeStatus{}}
	if err := a.pool.QueryRow(ctx, a.q.BlockedAggregates).Scan(&st.BlockedAggregates); err != nil {
		return nil, a.fail(ctx, "status", err)
	}
	if err := a.pool.QueryRow(ctx, a.q.Scheduled).Scan(&st.Scheduled, &st.NextDue); err != nil {
		return nil, a.fail(ctx, "status", err)
	}
	waiting, err := a.waiting(ctx)
	if err != nil {
		return nil, a.fail(ctx, "status", err)
	}
	st.Waiting = waiting
	rows, err := a.pool.Query(ctx, a.q.Status)
	if err != nil {
		return nil, a.fail(ctx, "status", err)
	}
	type typeRow struct {
		TypeStatus
		oldest *time.Time
	}
	types, err := collect(rows, func(r *typeRow) []any {
		return []any{&r.EventType, &r.Pending, &r.DeadLetters, &r.Held, &r.PublishedLastMinute, &r.PublishedLastHour, &r.oldest}
	})
	if err != nil {
		return nil, a.fail(ctx, "status", err)
	}
	for _, r := range types {
		ts := r.TypeStatus
		if r.oldest != nil {
			ts.OldestPendingAge = max(now.Sub(*r.oldest), 0)
		}
		ts.OldestPendingAgeSeconds = ts.OldestPendingAge.Seconds()
		st.ByType = append(st.ByType, ts)
		st.Pending += ts.Pending
		st.DeadLetters += ts.DeadLetters
		st.Held += ts.Held
		st.PublishedLastMinute += ts.PublishedLastMinute
		st.PublishedLastHour += ts.PublishedLastHour
		st.OldestPendingAge = max(st.OldestPendingAge, ts.OldestPendingAge)
		st.OldestPendingAgeSeconds = st.OldestPendingAge.Seconds()
	}
	return st, nil
}

// DeadLetterFilter selects dead letters. Zero values select everything.
type DeadLetterFilter struct {
	EventType string        // only this event type
	OlderThan time.Duration // only events created at least this long ago
	Limit     int           // at most this many (default 100)
}

// DeadLetters lists dead letters in insertion order.
func (a *Admin) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]outbox.Record, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.OlderThan < 0 {
		return nil, fmt.Errorf("admin: DeadLetterFilter.OlderThan: %s must not be negative", f.OlderThan)
	}
	rows, err := a.pool.Query(ctx, a.q.DeadLetters, f.EventType, f.OlderThan, f.Limit)
	if unstorable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, a.fail(ctx, "dead letters", err)
	}
	out, err := collect(rows, func(r *outbox.Record) []any {
		return []any{&r.ID, &r.Seq, &r.AggregateType, &r.AggregateID, &r.EventType, &r.Payload,
			headerScanner{&r.Headers}, &r.Attempts, &r.CreatedAt, &r.ProcessedAt, &r.RetryAfter, &r.DeadAt, &r.LastError}
	})
	if err != nil {
		return nil, a.fail(ctx, "dead letters", err)
	}
	return out, nil
}

// RetrySelector says which rows Retry re-queues: either IDs, or dead letters
// selected by EventType, ErrorGroup (or NoError) and OlderThan (together), or
// All dead letters (with OlderThan if set). DeadLetterGroup.Selector returns
// the selector of one group as DeadLetterGroups lists it.
type RetrySelector struct {
	// IDs re-queues these unprocessed rows, dead letters or rows waiting for
	// their backoff.
	IDs []uuid.UUID
	// EventType re-queues the dead letters of this type. Empty means any
	// type.
	EventType string
	// ErrorGroup re-queues the dead letters whose normalised error is this
	// (DeadLetterGroup.Error). Empty means any error: the group of dead
	// letters that recorded no error is selected with NoError.
	ErrorGroup string
	// NoError re-queues the dead letters that recorded no error: the group
	// DeadLetterGroups lists with an empty Error. It cannot be combined with
	// ErrorGroup.
	NoError bool
	// OlderThan keeps only dead letters created at least this long ago.
	OlderThan time.Duration
	// All re-queues every dead letter.
	All bool
	// DryRun counts the rows without changing them.
	DryRun bool
}

// DiscardSelector says which dead letters Discard deletes, with the same
// rules as RetrySelector; IDs that are not dead letters are left alone.
type DiscardSelector RetrySelector

// deadFilter checks a selector and returns the arguments of the dead-letter
// filter, or byID when the selector names ids.
func deadFilter(what string, sel RetrySelector) (args []any, byID bool, err error) {
	group := sel.ErrorGroup != "" || sel.NoError
	filter := sel.EventType != "" || group || sel.OlderThan != 0
	switch {
	case sel.OlderThan < 0:
		return nil, false, fmt.Errorf("admin: %s.OlderThan: %s must not be negative", what, sel.OlderThan)
	case sel.NoError && sel.ErrorGroup != "":
		return nil, false, fmt.Errorf("admin: %s: NoError selects the dead letters without an error; it cannot be combined with ErrorGroup %q", what, sel.ErrorGroup)
	case len(sel.IDs) > 0 && (filter || sel.All):
		return nil, false, fmt.Errorf("admin: %s: IDs cannot be combined with EventType, ErrorGroup, NoError, OlderThan or All", what)
	case len(sel.IDs) > 0:
		return []any{uuidArgs(sel.IDs)}, true, nil
	case sel.All && (sel.EventType != "" || group):
		return nil, false, fmt.Errorf("admin: %s: All cannot be combined with EventType, ErrorGroup or NoError", what)
	case !sel.All && !filter:
		return nil, false, fmt.Errorf("admin: %s: set IDs, All, or at least one of EventType, ErrorGroup, NoError, OlderThan", what)
	}
	// NULL selects any error; '' the group of the dead letters without one.
	var errorGroup *string
	if group {
		errorGroup = &sel.ErrorGroup
	}
	return []any{sel.EventType, errorGroup, sel.OlderThan}, false, nil
}

// Retry is the manual retry path: it resets attempts, retry_after and the
// dead-letter mark of the selected rows, so the relay publishes them again at
// once. It returns how many rows it re-queued (or would, with DryRun).
func (a *Admin) Retry(ctx context.Context, sel RetrySelector) (int64, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	args, byID, err := deadFilter("RetrySelector", sel)
	if err != nil {
		return 0, err
	}
	query := a.aq.RetryDead
	switch {
	case byID && sel.DryRun:
		query = a.q.CountRetryIDs
	case byID:
		query = a.q.RetryIDs
	case sel.DryRun:
		query = a.aq.CountDead
	}
	if sel.DryRun {
		var n int64
		if err := a.pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			return 0, a.fail(ctx, "retry", err)
		}
		return n, nil
	}
	tag, err := a.pool.Exec(ctx, query, args...)
	if err != nil {
		return 0, a.fail(ctx, "retry", err)
	}
	return tag.RowsAffected(), nil
}

// DiscardResult says what Discard did.
type DiscardResult struct {
	// Discarded counts the dead letters deleted (or that would be, with
	// DryRun).
	Discarded int64 `json:"discarded"`
	// Released counts the events the discarded dead letters held back in
	// ordered mode; they are pending again.
	Released int64 `json:"released"`
}

// Discard deletes dead letters for good, for the ones nobody will retry.
// Events a discarded dead letter held back (ordered mode) are released in the
// same statement, so its aggregate moves on. Only dead letters are touched:
// an id of a pending, held or published event is not discarded.
func (a *Admin) Discard(ctx context.Context, sel DiscardSelector) (DiscardResult, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	args, byID, err := deadFilter("DiscardSelector", RetrySelector(sel))
	if err != nil {
		return DiscardResult{}, err
	}
	var res DiscardResult
	switch {
	case sel.DryRun:
		query := a.aq.CountDead
		if byID {
			query = a.aq.CountDiscardIDs
		}
		err = a.pool.QueryRow(ctx, query, args...).Scan(&res.Discarded)
	default:
		var aq *store.AdminQueries
		if aq, _, err = a.deleting(ctx); err != nil {
			break
		}
		query := aq.DiscardDead
		if byID {
			query = aq.DiscardIDs
		}
		err = a.pool.QueryRow(ctx, query, args...).Scan(&res.Discarded, &res.Released)
	}
	if err != nil {
		return DiscardResult{}, a.fail(ctx, "discard", err)
	}
	return res, nil
}

// DeadLetterGroup is a set of dead letters with one event type and one
// normalised error (numbers and ids replaced by <n> and <id>; an error
// longer than 200 characters keeps its start and its end around " ... ").
type DeadLetterGroup struct {
	// EventType is empty when grouped by error alone.
	EventType string `json:"event_type"`
	// Error is the normalised error; empty for the dead letters that
	// recorded none, which make a group of their own.
	Error     string    `json:"error"`
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"` // earliest dead_at
	LastSeen  time.Time `json:"last_seen"`  // latest dead_at
	// SampleID is the group's first event, to look at one of them.
	SampleID uuid.UUID `json:"sample_id"`
}

// Selector returns the selector of exactly this group's dead letters, for
// Retry, Discard and DeadLetterGroupMembers: an empty Error selects the
// dead letters without an error (NoError), never every error.
func (g DeadLetterGroup) Selector() RetrySelector {
	return RetrySelector{EventType: g.EventType, ErrorGroup: g.Error, NoError: g.Error == ""}
}

// DeadLetterGroups counts dead letters per event type and error, the largest
// groups first; with byErrorOnly, per error across event types. A group is
// acted on with Retry or Discard through its Selector.
func (a *Admin) DeadLetterGroups(ctx context.Context, byErrorOnly bool) ([]DeadLetterGroup, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	rows, err := a.pool.Query(ctx, a.aq.DeadGroups, byErrorOnly)
	if err != nil {
		return nil, a.fail(ctx, "dead-letter groups", err)
	}
	out, err := collect(rows, func(g *DeadLetterGroup) []any {
		return []any{&g.EventType, &g.Error, &g.Count, &g.FirstSeen, &g.LastSeen, &g.SampleID}
	})
	if err != nil {
		return nil, a.fail(ctx, "dead-letter groups", err)
	}
	return out, nil
}

// EventState is where an event stands.
type EventState string

const (
	StatePending   EventState = "pending"   // waiting for the relay
	StateRetrying  EventState = "retrying"  // failed, waiting for its backoff
	StateDead      EventState = "dead"      // a dead letter
	StateHeld      EventState = "held"      // held back by an earlier failing event of its aggregate
	StatePublished EventState = "published" // confirmed by the broker
)

// EventInfo is one event as an operator sees it.
type EventInfo struct {
	outbox.Record
	State EventState
	// HeldBy is the failing event that holds this one back (StateHeld).
	HeldBy *uuid.UUID
}

// Events reads the events among ids, in any state, in insertion order; ids
// that match no row are left out. An aggregate's events are read with
// AggregateTimeline.
func (a *Admin) Events(ctx context.Context, ids ...uuid.UUID) ([]EventInfo, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	rows, err := a.pool.Query(ctx, a.aq.EventsByID, uuidArgs(ids))
	if err != nil {
		return nil, a.fail(ctx, "events", err)
	}
	return a.collectEvents(ctx, rows, "events")
}

func stateOf(e *EventInfo) EventState {
	switch {
	case e.ProcessedAt != nil:
		return StatePublished
	case e.HeldBy != nil:
		return StateHeld
	case e.DeadAt != nil:
		return StateDead
	case e.Attempts > 0: // a re-queued event keeps its last error but is pending again
		return StateRetrying
	}
	return StatePending
}

// Unprocessed returns the ids among ids that exist and are not published:
// what Retry by IDs can act on. The others are unknown or already published.
func (a *Admin) Unprocessed(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	rows, err := a.pool.Query(ctx, a.aq.Unprocessed, uuidArgs(ids))
	if err != nil {
		return nil, a.fail(ctx, "lookup", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, a.fail(ctx, "lookup", err)
	}
	return found, nil
}

// Cleanup deletes rows processed more than olderThan ago, batchSize rows per
// statement (default outbox.DefaultCleanupBatch, as the relay's), calling
// progress with the running total after each batch. It returns how many
// rows it deleted.
func (a *Admin) Cleanup(ctx context.Context, olderThan time.Duration, batchSize int, progress func(deleted int64)) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("admin: Cleanup: retention %s must not be negative", olderThan)
	}
	if batchSize <= 0 {
		batchSize = outbox.DefaultCleanupBatch
	}
	ctx, each, stop := a.boundPerBatch(ctx, progress)
	defer stop()
	n, err := engine.Cleanup(ctx, a.pool, a.q, olderThan, batchSize, each)
	if err != nil {
		return n, a.fail(ctx, "cleanup", err)
	}
	return n, nil
}

// PublishedBefore counts the events published more than olderThan ago:
// what Cleanup would delete and Archive would move, without touching them
// (a dry run). Pending events and dead letters are not counted.
func (a *Admin) PublishedBefore(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("admin: PublishedBefore: age %s must not be negative", olderThan)
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var n int64
	if err := a.pool.QueryRow(ctx, a.q.CountProcessedBefore, olderThan).Scan(&n); err != nil {
		return 0, a.fail(ctx, "count published events", err)
	}
	return n, nil
}
