package wal

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/outbox/internal/rowval"
	"github.com/pgoutbox/outbox/outboxtype"
)

// DecodeError is an inserted row of the outbox table the stream could not
// turn into a message (a NULL where a value is required, a value of the
// wrong shape). It is reported in its transaction, never dropped: LSN
// locates the row in the WAL, Commit its transaction (Tx.LSN, what Ack
// takes), ID identifies it in the table when it could be read.
type DecodeError struct {
	LSN    pglogrepl.LSN
	Commit pglogrepl.LSN
	ID     uuid.UUID // zero when the id itself could not be read
	Err    error
}

func (e *DecodeError) Error() string {
	if e.ID != uuid.Nil {
		return fmt.Sprintf("WAL source: event %s at %s: %v", e.ID, e.LSN, e.Err)
	}
	return fmt.Sprintf("WAL source: row at %s: %v", e.LSN, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// The outbox columns the stream reads, by their place in relation.at.
const (
	colID = iota
	colAggregateType
	colAggregateID
	colEventType
	colPayload
	colCreatedAt
	colSeq
	colHeaders
	colDeliverAt
	numCols
)

// colNames are the columns' names. The first five are required: no message
// goes without them. created_at, seq, headers and deliver_at are read when
// the table has them (the article's minimal table has no seq or headers).
var colNames = [numCols]string{"id", "aggregate_type", "aggregate_id", "event_type", "payload",
	"created_at", "seq", "headers", "deliver_at"}

const requiredCols = colPayload + 1

// relation is a table the stream was told about, and where the outbox
// columns are in its rows. The positions come from the Relation message,
// never from the table's definition as we know it: a column added by hand
// or a table created in another column order decodes the same.
type relation struct {
	outbox bool         // the configured outbox table; other tables are ignored
	width  int          // columns in each row
	at     [numCols]int // position of each outbox column; -1 when absent
	oid    [numCols]uint32
	// handed are the positions of retry_after, dead_at and processed_at
	// (absent ones left out): see handedOver.
	handed []int
	// plans are the type map's scan plans of the columns decoded through
	// it, made on first use.
	plans [numCols]pgtype.ScanPlan
}

func newRelation(m *pglogrepl.RelationMessage, n Names) *relation {
	r := &relation{width: len(m.Columns)}
	r.outbox = m.RelationName == n.Table.Table && (n.Table.Schema == "" || m.Namespace == n.Table.Schema)
	for k := range r.at {
		r.at[k] = -1
	}
	for i, c := range m.Columns {
		switch c.Name {
		case "retry_after", "dead_at", "processed_at":
			r.handed = append(r.handed, i)
		}
		for k, name := range colNames {
			if c.Name == name {
				r.at[k], r.oid[k] = i, c.DataType
			}
		}
	}
	return r
}

// cell is one value of an inserted row as the message holds it: its kind
// (pglogrepl.TupleDataType*) and its bytes, which alias the message's
// buffer and are valid only until the stream reads the next message.
type cell struct {
	kind byte
	data []byte
}

func (c cell) null() bool { return c.kind == pglogrepl.TupleDataTypeNull }

// handedOver reports whether a row was inserted already on the table path
// (retry_after or dead_at set) or already delivered (processed_at set).
// Such a row is not the stream's to deliver: it is a row a relay moved
// (a parked event whose new seq took it to another partition, the
// undelivered events of a partition being dropped), or one inserted for
// the table workers, which claim it through the handoff index.
func (r *relation) handedOver(cells []cell) bool {
	for _, i := range r.handed {
		if i < len(cells) && !cells[i].null() {
			return true
		}
	}
	return false
}

// parseInsert reads a pgoutput Insert message ('I', the relation's id, 'N',
// the new row) into cells, reusing their backing array. Nothing is copied:
// the stream decodes each row before it reads the next message, and copies
// only the values a message keeps. Every length is checked, so a malformed
// message is an error, not a panic.
func parseInsert(b []byte, cells []cell) (rel uint32, _ []cell, err error) {
	if len(b) < 8 || b[0] != byte(pglogrepl.MessageTypeInsert) {
		return 0, cells, fmt.Errorf("insert message of %d bytes: too short", len(b))
	}
	rel = binary.BigEndian.Uint32(b[1:5])
	if b[5] != 'N' {
		return 0, cells, fmt.Errorf("insert message: tuple marked %q, want 'N'", b[5])
	}
	n := int(binary.BigEndian.Uint16(b[6:8]))
	b = b[8:]
	cells = cells[:0]
	for i := 0; i < n; i++ {
		if len(b) == 0 {
			return 0, cells, fmt.Errorf("insert message: ends before column %d of %d", i+1, n)
		}
		c := cell{kind: b[0]}
		b = b[1:]
		switch c.kind {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(b) < 4 {
				return 0, cells, fmt.Errorf("insert message: column %d of %d: no length", i+1, n)
			}
			l := binary.BigEndian.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return 0, cells, fmt.Errorf("insert message: column %d of %d: %d bytes announced, %d left", i+1, n, l, len(b))
			}
			c.data = b[:l:l]
			b = b[l:]
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return 0, cells, fmt.Errorf("insert message: column %d of %d: unknown kind %q", i+1, n, c.kind)
		}
		cells = append(cells, c)
	}
	if len(b) != 0 {
		return 0, cells, fmt.Errorf("insert message: %d bytes after its %d columns", len(b), n)
	}
	return rel, cells, nil
}

// decoder turns the values of inserted rows into Go values, by the
// column's type OID: the common types directly, any other through pgx's
// type map.
type decoder struct {
	types *pgtype.Map
}

func newDecoder() *decoder { return &decoder{types: pgtype.NewMap()} }

// text is the value's text: pgoutput sends every value in text format
// unless a binary mode is asked for, which the stream never does.
func (c cell) text() ([]byte, error) {
	if c.kind != pglogrepl.TupleDataTypeText {
		return nil, fmt.Errorf("value sent as %q, want text", c.kind)
	}
	return c.data, nil
}

// message decodes one inserted row of the outbox table from its cells.
//
// deliverAt is the row's deliver_at (scheduled delivery), zero when NULL,
// absent or -infinity (due), Never when infinity.
func (d *decoder) message(r *relation, cells []cell, lsn pglogrepl.LSN) (m outboxtype.Message, deliverAt time.Time, _ *DecodeError) {
	m = outboxtype.Message{Attempt: 1}
	fail := func(format string, args ...any) (outboxtype.Message, time.Time, *DecodeError) {
		return outboxtype.Message{}, time.Time{}, &DecodeError{LSN: lsn, ID: m.ID, Err: fmt.Errorf(format, args...)}
	}
	if len(cells) != r.width {
		return fail("the row has a different number of columns than its relation message")
	}
	col := func(k int) (cell, bool) {
		if r.at[k] < 0 {
			return cell{}, false
		}
		c := cells[r.at[k]]
		return c, !c.null()
	}
	for k := 0; k < requiredCols; k++ {
		if r.at[k] < 0 {
			return fail("the table has no %s column", colNames[k])
		}
		if cells[r.at[k]].null() {
			return fail("%s is NULL", colNames[k])
		}
	}
	// Text is what uuid and any text-typed id column send alike.
	id, err := cells[r.at[colID]].text()
	if err == nil {
		m.ID, err = uuid.ParseBytes(id)
	}
	if err != nil {
		return fail("id: %v", err)
	}
	for _, f := range []struct {
		k   int
		dst *string
	}{{colAggregateType, &m.AggregateType}, {colAggregateID, &m.AggregateID}, {colEventType, &m.EventType}} {
		if err := d.scan(r, f.k, cells[r.at[f.k]], f.dst); err != nil {
			return fail("%s: %v", colNames[f.k], err)
		}
	}
	// The payload's text is the JSON, as the table path reads it.
	payload, err := cells[r.at[colPayload]].text()
	if err != nil {
		return fail("payload: %v", err)
	}
	m.Payload = append([]byte(nil), payload...)
	if c, ok := col(colCreatedAt); ok {
		if inf := infinite(c); inf != "" {
			return fail("%v", rowval.InfiniteCreatedAt(inf))
		}
		if err := d.scan(r, colCreatedAt, c, &m.CreatedAt); err != nil {
			return fail("created_at: %v", err)
		}
	}
	if c, ok := col(colSeq); ok {
		if err := d.scan(r, colSeq, c, &m.Seq); err != nil {
			return fail("seq: %v", err)
		}
	}
	if c, ok := col(colHeaders); ok {
		b, err := c.text()
		if err == nil {
			m.Headers, err = rowval.Headers(b)
		}
		if err != nil {
			return fail("%v", err)
		}
	}
	if c, ok := col(colDeliverAt); ok {
		switch infinite(c) {
		case "infinity":
			deliverAt = Never
		case "-infinity": // due since always
		default:
			if err := d.scan(r, colDeliverAt, c, &deliverAt); err != nil {
				return fail("deliver_at: %v", err)
			}
		}
	}
	return m, deliverAt, nil
}

// scan decodes c, the value of r's column k, into dst by the column's
// type. Strings of the text types and integers of the integer types, the
// common columns, skip the type map; the others reuse its plan.
func (d *decoder) scan(r *relation, k int, c cell, dst any) error {
	b, err := c.text()
	if err != nil {
		return err
	}
	oid := r.oid[k]
	switch dst := dst.(type) {
	case *string:
		switch oid {
		case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
			*dst = string(b)
			return nil
		}
	case *int64:
		switch oid {
		case pgtype.Int8OID, pgtype.Int4OID, pgtype.Int2OID:
			*dst, err = strconv.ParseInt(string(b), 10, 64)
			return err
		}
	}
	plan := &r.plans[k]
	if *plan == nil {
		*plan = d.types.PlanScan(oid, pgtype.TextFormatCode, dst)
	}
	return (*plan).Scan(b, dst)
}

// Never is the deliver_at of a row scheduled at infinity: later than any
// time, so the row is handed to the table path, where it waits.
var Never = time.Date(294277, time.January, 1, 0, 0, 0, 0, time.UTC)

// infinite is "infinity" or "-infinity" when c, a timestamp's text, is
// one of them, else "".
func infinite(c cell) string {
	switch b, _ := c.text(); string(b) {
	case "infinity", "-infinity":
		return string(b)
	}
	return ""
}
