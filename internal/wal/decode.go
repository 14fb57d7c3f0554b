package wal

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/outbox/outboxtype"
)

// DecodeError is an inserted row of the outbox table the stream could not
// turn into a message (a NULL where a value is required, a value of the
// wrong shape). It is reported in its transaction, never dropped: LSN
// locates the row in the WAL, ID identifies it in the table when it could
// be read.
type DecodeError struct {
	LSN pglogrepl.LSN
	ID  uuid.UUID // zero when the id itself could not be read
	Err error
}

func (e *DecodeError) Error() string {
	if e.ID != uuid.Nil {
		return fmt.Sprintf("WAL source: event %s at %s: %v", e.ID, e.LSN, e.Err)
	}
	return fmt.Sprintf("WAL source: row at %s: %v", e.LSN, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// relation is a table the stream was told about, and where the outbox
// columns are in its rows. The positions come from the Relation message,
// never from the table's definition as we know it: a column added by hand
// or a table created in another column order decodes the same.
type relation struct {
	outbox bool // the configured outbox table; other tables are ignored
	cols   []*pglogrepl.RelationMessageColumn
	index  map[string]int
}

// requiredCols are the outbox columns no message goes without. created_at,
// seq and headers are read when the table has them (the article's minimal
// table has no seq or headers).
var requiredCols = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload"}

func newRelation(m *pglogrepl.RelationMessage, n Names) *relation {
	r := &relation{cols: m.Columns, index: make(map[string]int, len(m.Columns))}
	r.outbox = m.RelationName == n.Table.Table && (n.Table.Schema == "" || m.Namespace == n.Table.Schema)
	for i, c := range m.Columns {
		r.index[c.Name] = i
	}
	return r
}

// decoder turns pgoutput's text-format column values into Go values with
// pgx's type map, by the column's type OID.
type decoder struct {
	types *pgtype.Map
}

func newDecoder() *decoder { return &decoder{types: pgtype.NewMap()} }

// message decodes one inserted row of the outbox table.
func (d *decoder) message(r *relation, t *pglogrepl.TupleData, lsn pglogrepl.LSN) (outboxtype.Message, *DecodeError) {
	m := outboxtype.Message{Attempt: 1}
	fail := func(format string, args ...any) (outboxtype.Message, *DecodeError) {
		return outboxtype.Message{}, &DecodeError{LSN: lsn, ID: m.ID, Err: fmt.Errorf(format, args...)}
	}
	if t == nil || len(t.Columns) != len(r.cols) {
		return fail("the row has a different number of columns than its relation message")
	}
	col := func(name string) (*pglogrepl.TupleDataColumn, uint32, bool) {
		i, ok := r.index[name]
		if !ok {
			return nil, 0, false
		}
		return t.Columns[i], r.cols[i].DataType, true
	}
	for _, name := range requiredCols {
		c, _, ok := col(name)
		switch {
		case !ok:
			return fail("the table has no %s column", name)
		case c.DataType == pglogrepl.TupleDataTypeNull:
			return fail("%s is NULL", name)
		}
	}
	var err error
	if m.ID, err = d.uuid(col("id")); err != nil {
		return fail("id: %v", err)
	}
	if m.AggregateType, err = d.text(col("aggregate_type")); err != nil {
		return fail("aggregate_type: %v", err)
	}
	if m.AggregateID, err = d.text(col("aggregate_id")); err != nil {
		return fail("aggregate_id: %v", err)
	}
	if m.EventType, err = d.text(col("event_type")); err != nil {
		return fail("event_type: %v", err)
	}
	if m.Payload, err = d.bytes(col("payload")); err != nil {
		return fail("payload: %v", err)
	}
	if c, oid, ok := col("created_at"); ok && c.DataType != pglogrepl.TupleDataTypeNull {
		if m.CreatedAt, err = d.time(c, oid); err != nil {
			return fail("created_at: %v", err)
		}
	}
	if c, oid, ok := col("seq"); ok && c.DataType != pglogrepl.TupleDataTypeNull {
		if err := d.scan(c, oid, &m.Seq); err != nil {
			return fail("seq: %v", err)
		}
	}
	if c, oid, ok := col("headers"); ok && c.DataType != pglogrepl.TupleDataTypeNull {
		if m.Headers, err = d.headers(c, oid); err != nil {
			return fail("headers: %v", err)
		}
	}
	return m, nil
}

func (d *decoder) scan(c *pglogrepl.TupleDataColumn, oid uint32, dst any) error {
	if c.DataType != pglogrepl.TupleDataTypeText {
		return fmt.Errorf("value sent as %q, want text", c.DataType)
	}
	return d.types.Scan(oid, pgtype.TextFormatCode, c.Data, dst)
}

func (d *decoder) uuid(c *pglogrepl.TupleDataColumn, oid uint32, _ bool) (uuid.UUID, error) {
	var u uuid.UUID
	if c.DataType != pglogrepl.TupleDataTypeText {
		return u, fmt.Errorf("value sent as %q, want text", c.DataType)
	}
	// Text is what uuid and any text-typed id column send alike.
	return uuid.ParseBytes(c.Data)
}

func (d *decoder) text(c *pglogrepl.TupleDataColumn, oid uint32, _ bool) (string, error) {
	var s string
	err := d.scan(c, oid, &s)
	return s, err
}

// bytes returns the column's text as it is: a jsonb payload's text is the
// JSON, as the table path reads it.
func (d *decoder) bytes(c *pglogrepl.TupleDataColumn, _ uint32, _ bool) ([]byte, error) {
	if c.DataType != pglogrepl.TupleDataTypeText {
		return nil, fmt.Errorf("value sent as %q, want text", c.DataType)
	}
	return append([]byte(nil), c.Data...), nil
}

func (d *decoder) time(c *pglogrepl.TupleDataColumn, oid uint32) (time.Time, error) {
	var t time.Time
	err := d.scan(c, oid, &t)
	return t, err
}

// headers decodes the headers column as the table path does: a JSON object
// of string values, anything else is a decode error.
func (d *decoder) headers(c *pglogrepl.TupleDataColumn, _ uint32) (map[string]string, error) {
	if c.DataType != pglogrepl.TupleDataTypeText {
		return nil, fmt.Errorf("value sent as %q, want text", c.DataType)
	}
	var h map[string]string
	if err := json.Unmarshal(c.Data, &h); err != nil {
		return nil, fmt.Errorf("%.200s: want a JSON object of string values: %v", c.Data, err)
	}
	return h, nil
}
