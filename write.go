package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox/internal/dbtx"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

// DefaultTable is the outbox table's default name.
const DefaultTable = ident.DefaultTable

// WriterConfig configures a Writer. The zero value writes to the
// outbox_events table resolved through the connection's search_path.
type WriterConfig struct {
	// Schema holding the outbox table. Empty: the search_path decides, as
	// for an unqualified INSERT written by hand.
	Schema string
	// Table is the outbox table's name. Defaults to DefaultTable
	// ("outbox_events").
	Table string
	// MaxPayloadBytes caps an event's size: its payload plus its headers'
	// keys and values, in bytes. Write refuses a larger event with a
	// ValidationError before touching the database, instead of storing a
	// row the broker will refuse (a dead letter) or that weighs on every
	// relay that claims it. The default fits the smallest default limit
	// among the supported brokers, NATS's max_payload of 1 MiB (Kafka's
	// message.max.bytes and SQS's limit are about the same; RabbitMQ and
	// Redis accept more), less 4 KiB for the headers the relay adds (event
	// id, type, aggregate, trace context). Raise it when your broker is
	// configured for more. Negative means no limit. Defaults to
	// DefaultMaxPayloadBytes (1 MiB - 4 KiB).
	MaxPayloadBytes int
}

// DefaultMaxPayloadBytes is WriterConfig.MaxPayloadBytes's default.
const DefaultMaxPayloadBytes = 1<<20 - 4<<10

// Writer adds events to the outbox inside the caller's transaction. It never
// begins, commits or rolls back a transaction and never talks to a broker: the
// event becomes visible to the relay when, and only if, the caller commits.
// A Writer is safe for concurrent use.
type Writer struct {
	names      ident.Names
	maxPayload int // < 0: no limit
}

// maxParamsPerStatement is PostgreSQL's bind-parameter limit.
const maxParamsPerStatement = 65535

const colsPerEvent = 6

// colsPerScheduledEvent: a statement with a scheduled event also binds each
// event's DeliverAt and Delay.
const colsPerScheduledEvent = colsPerEvent + 2

// maxEventsPerStatement keeps one INSERT under the bind-parameter limit; larger
// calls are split, still without leaving the caller's transaction.
const maxEventsPerStatement = maxParamsPerStatement / colsPerEvent

// NewWriter validates cfg and returns a Writer.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, ident.ConfigErr("WriterConfig", err)
	}
	return &Writer{names: n, maxPayload: cmp.Or(cfg.MaxPayloadBytes, DefaultMaxPayloadBytes)}, nil
}

var defaultWriter = &Writer{names: must(ident.New("", "")), maxPayload: DefaultMaxPayloadBytes}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Write inserts events into the outbox table in tx, a pgx transaction the
// caller owns, in one round trip, and returns their ids in order. When ctx
// carries an OpenTelemetry span, its W3C trace context is stored in each
// event's headers (traceparent, tracestate) unless they already hold one. Events are
// validated first; an invalid one fails the whole call before the database is
// touched, so the caller's transaction is not aborted.
func (w *Writer) Write(ctx context.Context, tx pgx.Tx, events ...Event) ([]uuid.UUID, error) {
	// The role, for the GRANT a missing privilege needs, is read only
	// then: Conn().Config() copies the connection's configuration.
	role := func() string {
		if tx == nil || tx.Conn() == nil {
			return ""
		}
		return tx.Conn().Config().User
	}
	return w.write(ctx, dbtx.Pgx(tx), role, events)
}

// WriteSQL is Write for a database/sql transaction, with any PostgreSQL driver
// (pgx's stdlib, lib/pq).
func (w *Writer) WriteSQL(ctx context.Context, tx *sql.Tx, events ...Event) ([]uuid.UUID, error) {
	return w.write(ctx, dbtx.SQL(tx), nil, events)
}

// Write inserts events into the default table (outbox_events on the
// search_path) in the caller's pgx transaction. See Writer.Write.
func Write(ctx context.Context, tx pgx.Tx, events ...Event) ([]uuid.UUID, error) {
	return defaultWriter.Write(ctx, tx, events...)
}

// WriteSQL inserts events into the default table in the caller's database/sql
// transaction. See Writer.WriteSQL.
func WriteSQL(ctx context.Context, tx *sql.Tx, events ...Event) ([]uuid.UUID, error) {
	return defaultWriter.WriteSQL(ctx, tx, events...)
}

func (w *Writer) write(ctx context.Context, tx dbtx.Querier, role func() string, events []Event) ([]uuid.UUID, error) {
	return w.statements(ctx, events, func(n int, query string, args []any) error {
		_, err := tx.Exec(ctx, query, args...)
		return w.insertErr(n, role, err)
	})
}

// Queue adds the INSERT of events to b, a pgx.Batch the caller sends, and
// returns their ids in order. The events travel in the round trip of the
// caller's own statements instead of one of their own, a good part of
// what an outbox costs a transaction that writes little else. They commit
// with the batch: sent with tx.SendBatch, in the caller's transaction; sent
// on a pool or connection outside one, in the implicit transaction pgx runs
// a batch in (all its statements, or none).
//
// Events are validated now, and get ctx's trace context in their headers,
// as by Write: an invalid one queues nothing.
// The INSERT's error is returned by the BatchResults' Close, naming the
// outbox table; a caller reading the results one by one gets PostgreSQL's
// error as is from the Exec that reads the INSERT's.
func (w *Writer) Queue(ctx context.Context, b *pgx.Batch, events ...Event) ([]uuid.UUID, error) {
	if b == nil {
		return nil, errors.New("outbox: Queue: nil *pgx.Batch")
	}
	return w.statements(ctx, events, func(n int, query string, args []any) error {
		b.Queue(query, args...).Fn = func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return w.insertErr(n, nil, err)
		}
		return nil
	})
}

// insertErr names the table in the error of an INSERT of n events, and
// the GRANT a missing privilege needs (to role's, nil when unknown).
func (w *Writer) insertErr(n int, role func() string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") && strings.Contains(pgErr.Message, `"stmtcache_`) {
		// duplicate_prepared_statement, invalid_sql_statement_name: pgx's
		// statement cache behind a pooler that does not keep them.
		return fmt.Errorf("outbox: insert %d event(s) into %s: %w (the connection goes through a pooler that does not keep prepared statements, such as PgBouncer before 1.21 in transaction mode: add default_query_exec_mode=cache_describe to the connection string)", n, w.names.QTable, err)
	}
	name := ""
	if role != nil && store.IsInsufficientPrivilege(err) {
		name = role()
	}
	return fmt.Errorf("outbox: insert %d event(s) into %s: %w", n, w.names.QTable, store.WriterDenied(w.names, name, err))
}

// Queue adds the INSERT of events into the default table to b. See
// Writer.Queue.
func Queue(ctx context.Context, b *pgx.Batch, events ...Event) ([]uuid.UUID, error) {
	return defaultWriter.Queue(ctx, b, events...)
}

// statements validates events, gives those without one an id, and hands
// each INSERT (of n events) to run.
func (w *Writer) statements(ctx context.Context, events []Event, run func(n int, query string, args []any) error) ([]uuid.UUID, error) {
	if len(events) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(events))
	for i := range events {
		if err := events[i].validate(i); err != nil {
			return nil, err
		}
		if err := events[i].checkSize(i, w.maxPayload); err != nil {
			return nil, err
		}
		ids[i] = events[i].ID
		if ids[i] == uuid.Nil {
			id, err := newID()
			if err != nil {
				return nil, err
			}
			ids[i] = id
		}
	}
	// Only a call with a scheduled event names deliver_at, so writing
	// unscheduled events works on a table from before migration 6.
	sched := false
	for i := range events {
		sched = sched || events[i].scheduled()
	}
	per := maxEventsPerStatement
	if sched {
		per = maxParamsPerStatement / colsPerScheduledEvent
	}
	// Built before any is run, so a headers error queues nothing.
	type stmt struct {
		n     int
		query string
		args  []any
	}
	var stmts []stmt
	for start := 0; start < len(events); start += per {
		end := min(start+per, len(events))
		query, args, err := w.insertStatement(ctx, events[start:end], ids[start:end], sched)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, stmt{end - start, query, args})
	}
	for _, s := range stmts {
		if err := run(s.n, s.query, s.args); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// insertStatement builds one multi-row INSERT. Only placeholders and the
// quoted table name enter the text; values are bind parameters. Multi-row
// VALUES (rather than unnest of arrays) works with every database/sql driver.
//
// With sched, each row also sets deliver_at: DeliverAt, or now() + Delay, or
// NULL when that is not after now() (by the database clock), so an event
// due already is an ordinary pending event.
func (w *Writer) insertStatement(ctx context.Context, events []Event, ids []uuid.UUID, sched bool) (string, []any, error) {
	cols := colsPerEvent
	if sched {
		cols = colsPerScheduledEvent
	}
	var b strings.Builder
	b.Grow(96 + len(events)*64)
	b.WriteString("INSERT INTO ")
	b.WriteString(w.names.QTable)
	if sched {
		b.WriteString(" (id, aggregate_type, aggregate_id, event_type, payload, headers, deliver_at) VALUES ")
	} else {
		b.WriteString(" (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ")
	}
	args := make([]any, 0, len(events)*cols)
	for i := range events {
		e := &events[i]
		if i > 0 {
			b.WriteByte(',')
		}
		p := i*cols + 1
		b.WriteString("($")
		b.WriteString(strconv.Itoa(p))
		b.WriteString("::uuid,$")
		b.WriteString(strconv.Itoa(p + 1))
		b.WriteString(",$")
		b.WriteString(strconv.Itoa(p + 2))
		b.WriteString(",$")
		b.WriteString(strconv.Itoa(p + 3))
		b.WriteString(",$")
		b.WriteString(strconv.Itoa(p + 4))
		b.WriteString("::jsonb,$")
		b.WriteString(strconv.Itoa(p + 5))
		b.WriteString("::jsonb")
		if sched {
			at, delay := strconv.Itoa(p+6), strconv.Itoa(p+7)
			b.WriteString(",nullif(greatest(coalesce($" + at + "::timestamptz, now() + $" + delay +
				"::bigint * interval '1 microsecond'), now()), now())")
		}
		b.WriteByte(')')
		var headers any // SQL NULL when there are none
		if hs := withTraceContext(ctx, e.Headers); len(hs) > 0 {
			h, err := json.Marshal(hs)
			if err != nil {
				return "", nil, fmt.Errorf("outbox: event %d: headers: %w", i, err)
			}
			headers = string(h)
		}
		args = append(args, ids[i].String(), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload), headers)
		if sched {
			var at any // NULL: now, or Delay after now
			if !e.DeliverAt.IsZero() {
				at = e.DeliverAt
			}
			args = append(args, at, e.Delay.Microseconds())
		}
	}
	return b.String(), args, nil
}
