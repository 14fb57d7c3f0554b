package wal

import (
	"encoding/json"
	"fmt"
	"strconv"
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

// column is one value of a row with its type, as the Relation message
// describes it.
type column struct {
	*pglogrepl.TupleDataColumn
	oid uint32
}

func (c column) null() bool { return c.DataType == pglogrepl.TupleDataTypeNull }

// text is the value's text: pgoutput sends every value in text format
// unless a binary mode is asked for, which the stream never does.
func (c column) text() ([]byte, error) {
	if c.DataType != pglogrepl.TupleDataTypeText {
		return nil, fmt.Errorf("value sent as %q, want text", c.DataType)
	}
	return c.Data, nil
}

// message decodes one inserted row of the outbox table.
//
// deliverAt is the row's deliver_at (scheduled delivery), zero when NULL or
// absent.
func (d *decoder) message(r *relation, t *pglogrepl.TupleData, lsn pglogrepl.LSN) (m outboxtype.Message, deliverAt time.Time, _ *DecodeError) {
	m = outboxtype.Message{Attempt: 1}
	fail := func(format string, args ...any) (outboxtype.Message, time.Time, *DecodeError) {
		return outboxtype.Message{}, time.Time{}, &DecodeError{LSN: lsn, ID: m.ID, Err: fmt.Errorf(format, args...)}
	}
	if t == nil || len(t.Columns) != len(r.cols) {
		return fail("the row has a different number of columns than its relation message")
	}
	col := func(name string) (column, bool) {
		i, ok := r.index[name]
		if !ok {
			return column{}, false
		}
		return column{t.Columns[i], r.cols[i].DataType}, true
	}
	cols := make(map[string]column, len(requiredCols))
	for _, name := range requiredCols {
		c, ok := col(name)
		switch {
		case !ok:
			return fail("the table has no %s column", name)
		case c.null():
			return fail("%s is NULL", name)
		}
		cols[name] = c
	}
	// Text is what uuid and any text-typed id column send alike.
	id, err := cols["id"].text()
	if err == nil {
		m.ID, err = uuid.ParseBytes(id)
	}
	if err != nil {
		return fail("id: %v", err)
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"aggregate_type", &m.AggregateType}, {"aggregate_id", &m.AggregateID}, {"event_type", &m.EventType}} {
		if err := d.scan(cols[f.name], f.dst); err != nil {
			return fail("%s: %v", f.name, err)
		}
	}
	// The payload's text is the JSON, as the table path reads it.
	payload, err := cols["payload"].text()
	if err != nil {
		return fail("payload: %v", err)
	}
	m.Payload = append([]byte(nil), payload...)
	if c, ok := col("created_at"); ok && !c.null() {
		if err := d.scan(c, &m.CreatedAt); err != nil {
			return fail("created_at: %v", err)
		}
	}
	if c, ok := col("seq"); ok && !c.null() {
		if err := d.scan(c, &m.Seq); err != nil {
			return fail("seq: %v", err)
		}
	}
	if c, ok := col("headers"); ok && !c.null() {
		if m.Headers, err = headers(c); err != nil {
			return fail("headers: %v", err)
		}
	}
	if c, ok := col("deliver_at"); ok && !c.null() {
		if err := d.scan(c, &deliverAt); err != nil {
			return fail("deliver_at: %v", err)
		}
	}
	return m, deliverAt, nil
}

// scan decodes c's text into dst by c's type. Strings of the text types
// and integers of the integer types, the common columns, skip the type
// map's generic path.
func (d *decoder) scan(c column, dst any) error {
	b, err := c.text()
	if err != nil {
		return err
	}
	switch dst := dst.(type) {
	case *string:
		switch c.oid {
		case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
			*dst = string(b)
			return nil
		}
	case *int64:
		switch c.oid {
		case pgtype.Int8OID, pgtype.Int4OID, pgtype.Int2OID:
			*dst, err = strconv.ParseInt(string(b), 10, 64)
			return err
		}
	}
	return d.types.Scan(c.oid, pgtype.TextFormatCode, b, dst)
}

// headers decodes the headers column as the table path does: a JSON object
// of string values, anything else is a decode error.
func headers(c column) (map[string]string, error) {
	b, err := c.text()
	if err != nil {
		return nil, err
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%.200s: want a JSON object of string values: %v", b, err)
	}
	return h, nil
}
