package admin

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
)

// MinuteCount is how many events were published in one minute.
type MinuteCount struct {
	Minute time.Time `json:"minute"` // the minute's start
	Count  int64     `json:"count"`
}

// PublishedPerMinute counts the events published in each of the last minutes
// minutes, the current (partial) minute last; minutes without any are
// zero. Rows deleted on publish (outbox.RelayConfig.DeleteOnPublish) or by
// cleanup are not counted.
func (a *Admin) PublishedPerMinute(ctx context.Context, minutes int) ([]MinuteCount, error) {
	if minutes < 1 || minutes > 24*60 {
		return nil, errors.New("admin: PublishedPerMinute: minutes must be between 1 and 1440")
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	var now time.Time
	if err := a.pool.QueryRow(ctx, `SELECT date_trunc('minute', now())`).Scan(&now); err != nil {
		return nil, a.fail(ctx, "published per minute", err)
	}
	rows, err := a.pool.Query(ctx, store.NewConsole(a.names).PublishedPerMinute, minutes)
	if err != nil {
		return nil, a.fail(ctx, "published per minute", err)
	}
	out := make([]MinuteCount, minutes)
	first := now.Add(-time.Duration(minutes-1) * time.Minute)
	for i := range out {
		out[i].Minute = first.Add(time.Duration(i) * time.Minute)
	}
	counts, err := collect(rows, func(m *MinuteCount) []any { return []any{&m.Minute, &m.Count} })
	if err != nil {
		return nil, a.fail(ctx, "published per minute", err)
	}
	for _, m := range counts {
		if i := int(m.Minute.Sub(first) / time.Minute); i >= 0 && i < minutes {
			out[i].Count = m.Count
		}
	}
	return out, nil
}

// DeadLetterGroupMembers lists the dead letters sel selects, as Retry and
// Discard select them (EventType, ErrorGroup or NoError, OlderThan, or All;
// DeadLetterGroup.Selector gives a group's), in insertion order, at most
// limit (default 100). sel.IDs and sel.DryRun are not read: IDs are refused.
func (a *Admin) DeadLetterGroupMembers(ctx context.Context, sel RetrySelector, limit int) ([]EventInfo, error) {
	if len(sel.IDs) > 0 {
		return nil, errors.New("admin: DeadLetterGroupMembers: select a group, not IDs (read events by id with Events)")
	}
	args, _, err := deadFilter("RetrySelector", sel)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	rows, err := a.pool.Query(ctx, store.NewConsole(a.names).DeadInGroup, append(args, limit)...)
	if unstorable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, a.fail(ctx, "dead-letter group", err)
	}
	return a.collectEvents(ctx, rows, "dead-letter group")
}

// Defaults of TimelineQuery's fields, used for their zero (or negative)
// values.
const (
	// DefaultTimelineLimit is how many events AggregateTimeline returns.
	DefaultTimelineLimit = 100
	// DefaultTimelineWindow is how many of the latest published events
	// AggregateTimeline looks through for an aggregate's published history.
	DefaultTimelineWindow = 20000
)

// TimelineQuery selects an aggregate's events for AggregateTimeline.
type TimelineQuery struct {
	AggregateType string // "" for any type
	AggregateID   string
	// Limit caps the events returned, the latest kept. Defaults to
	// DefaultTimelineLimit (100).
	Limit int
	// PublishedWindow bounds the search for published events to the latest
	// this many published rows of the table: the aggregate index holds
	// unprocessed rows only, and a scan of every published row would grow
	// with the table. Defaults to DefaultTimelineWindow (20000).
	PublishedWindow int
}

// AggregateTimeline reads an aggregate's events in insertion order, with
// their state: every unprocessed one (pending, retrying, dead, held) and the
// published ones among the latest PublishedWindow published rows. Unlike
// Events, its cost does not grow with the number of published rows kept.
func (a *Admin) AggregateTimeline(ctx context.Context, q TimelineQuery) ([]EventInfo, error) {
	if q.AggregateID == "" {
		return nil, errors.New("admin: TimelineQuery.AggregateID: must not be empty")
	}
	if q.Limit <= 0 {
		q.Limit = DefaultTimelineLimit
	}
	if q.PublishedWindow <= 0 {
		q.PublishedWindow = DefaultTimelineWindow
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	rows, err := a.pool.Query(ctx, store.NewConsole(a.names).Timeline, q.AggregateType, q.AggregateID, q.Limit, q.PublishedWindow)
	if unstorable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, a.fail(ctx, "timeline", err)
	}
	out, err := a.collectEvents(ctx, rows, "timeline")
	if err != nil {
		return nil, err
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 { // read latest first; show in order
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// collectEvents reads rows of EventsByID's shape; ctx is the call's, bounded.
func (a *Admin) collectEvents(ctx context.Context, rows pgx.Rows, op string) ([]EventInfo, error) {
	out, err := collect(rows, func(e *EventInfo) []any {
		return []any{&e.ID, &e.Seq, &e.AggregateType, &e.AggregateID, &e.EventType, &e.Payload,
			headerScanner{&e.Headers}, &e.Attempts, &e.CreatedAt, &e.ProcessedAt, &e.RetryAfter, &e.DeadAt, &e.LastError, &e.HeldBy}
	})
	if unstorable(err) {
		return nil, nil // the lookup's value: see unstorable
	}
	if err != nil {
		return nil, a.fail(ctx, op, err)
	}
	for i := range out {
		out[i].State = stateOf(&out[i])
	}
	return out, nil
}

// BlockedAggregate is an aggregate whose later events wait behind a dead
// letter (held in ordered mode).
type BlockedAggregate struct {
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	DeadLetter    uuid.UUID `json:"dead_letter"`
	EventType     string    `json:"event_type"`
	ErrorGroup    string    `json:"error_group"`
	// Behind counts the unprocessed events after the dead letter.
	Behind int64 `json:"behind"`
}

// BlockedAggregateList lists at most limit (default 20) aggregates held back
// by a dead letter, the oldest dead letter first. Status.BlockedAggregates
// counts them all.
func (a *Admin) BlockedAggregateList(ctx context.Context, limit int) ([]BlockedAggregate, error) {
	if limit <= 0 {
		limit = 20
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	rows, err := a.pool.Query(ctx, store.NewConsole(a.names).Blocked, limit)
	if err != nil {
		return nil, a.fail(ctx, "blocked aggregates", err)
	}
	out, err := collect(rows, func(b *BlockedAggregate) []any {
		return []any{&b.AggregateType, &b.AggregateID, &b.DeadLetter, &b.EventType, &b.ErrorGroup, &b.Behind}
	})
	if err != nil {
		return nil, a.fail(ctx, "blocked aggregates", err)
	}
	return out, nil
}
