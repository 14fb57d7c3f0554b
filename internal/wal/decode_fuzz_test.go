package wal

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/outbox/internal/ident"
)

// fuzzRelation is the outbox table as migrations create it, with the
// column types the server announces.
func fuzzRelation() *relation {
	cols := []struct {
		name string
		oid  uint32
	}{
		{"id", pgtype.UUIDOID}, {"aggregate_type", pgtype.TextOID}, {"aggregate_id", pgtype.TextOID},
		{"event_type", pgtype.TextOID}, {"payload", pgtype.JSONBOID}, {"headers", pgtype.JSONBOID},
		{"created_at", pgtype.TimestamptzOID}, {"seq", pgtype.Int8OID}, {"deliver_at", pgtype.TimestamptzOID},
		{"attempts", pgtype.Int4OID}, {"processed_at", pgtype.TimestamptzOID},
	}
	m := &pglogrepl.RelationMessage{RelationID: 1, Namespace: "public", RelationName: "outbox_events"}
	for _, c := range cols {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: c.name, DataType: c.oid})
	}
	return newRelation(m, Names{Table: ident.Names{Table: "outbox_events"}})
}

// fuzzCell is a column value: kinds[i] picks how column i is sent (text,
// NULL, binary, unchanged TOAST), as a hostile or unusual server might.
func fuzzCell(kinds []byte, i int, v string) cell {
	k := byte(0)
	if i < len(kinds) {
		k = kinds[i] % 8
	}
	switch k {
	case 5:
		return cell{kind: pglogrepl.TupleDataTypeNull}
	case 6:
		return cell{kind: pglogrepl.TupleDataTypeBinary, data: []byte(v)}
	case 7:
		return cell{kind: pglogrepl.TupleDataTypeToast}
	}
	return cell{kind: pglogrepl.TupleDataTypeText, data: []byte(v)}
}

// FuzzDecodeInsert: any Insert message of the outbox table, well formed
// or not, with any values in its columns, decodes into a message or a
// DecodeError that names the row's position, never a panic. A decoded
// message has an id and its payload's bytes, on its first attempt.
func FuzzDecodeInsert(f *testing.F) {
	id := "0f8fad5b-d9cb-469f-a165-70867728950e"
	f.Add([]byte{}, id, "order", "o-1", "order.created", `{"total": 42}`, `{"traceparent": "00-x"}`, "2026-12-07 10:00:00+00", "7", "")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 5}, id, "order", "o-1", "order.created", `{}`, `{"retries": 3, "ok": true, "n": null, "o": {"a": 1}}`, "infinity", "1", "infinity")
	f.Add([]byte{0, 0, 0, 0, 0, 5, 0, 0, 0}, id, "ß", "é", "t", `[]`, `[1, 2]`, "-infinity", "-9223372036854775808", "-infinity")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, "not-a-uuid", "", "", "", `"x"`, `"x"`, "294276-12-31 23:59:59+00", "9223372036854775807", "294276-12-31 23:59:59+00")
	f.Add([]byte{6, 7, 5, 0, 6, 7, 6, 6, 6}, id, "a", "b", "c", "{}", "{}", "", "", "")
	f.Fuzz(func(t *testing.T, kinds []byte, id, aggType, aggID, evType, payload, headers, created, seq, deliver string) {
		r := fuzzRelation()
		vals := []string{id, aggType, aggID, evType, payload, headers, created, seq, deliver}
		cells := make([]cell, 0, r.width)
		for i, v := range vals {
			cells = append(cells, fuzzCell(kinds, i, v))
		}
		cells = append(cells, cell{kind: pglogrepl.TupleDataTypeText, data: []byte("0")}, cell{kind: pglogrepl.TupleDataTypeNull})
		msg := insertMessage(1, cells...)
		// Cut where kinds says, to reach the length checks too.
		if len(kinds) > 9 && kinds[9]%4 == 0 {
			msg = msg[:int(kinds[9])%(len(msg)+1)]
		}
		rel, parsed, err := parseInsert(msg, nil)
		if err != nil {
			return
		}
		if rel != 1 || len(parsed) != len(cells) {
			t.Fatalf("parsed relation %d with %d cells, sent 1 with %d", rel, len(parsed), len(cells))
		}
		const lsn = pglogrepl.LSN(0x16B3748)
		m, _, derr := newDecoder().message(r, parsed, lsn)
		if derr != nil {
			if derr.LSN != lsn || derr.Err == nil || derr.Error() == "" {
				t.Fatalf("decode error %#v: want the row's position and a reason", derr)
			}
			return
		}
		if m.ID == uuid.Nil && id != uuid.Nil.String() {
			t.Fatalf("decoded without an id from %q", id)
		}
		if !bytes.Equal(m.Payload, []byte(payload)) {
			t.Fatalf("payload %q, stored %q", m.Payload, payload)
		}
		if m.Attempt != 1 {
			t.Fatalf("a streamed event is on its first attempt, got %d", m.Attempt)
		}
	})
}
