package wal

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// insertMessage builds a pgoutput Insert message as the server sends it.
func insertMessage(rel uint32, cells ...cell) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cells)))
	for _, c := range cells {
		b = append(b, c.kind)
		if c.kind == 't' || c.kind == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
			b = append(b, c.data...)
		}
	}
	return b
}

func TestParseInsertAgreesWithPglogrepl(t *testing.T) {
	msg := insertMessage(16385,
		cell{kind: 't', data: []byte("0f8fad5b-d9cb-469f-a165-70867728950e")},
		cell{kind: 'n'},
		cell{kind: 't', data: []byte{}},
		cell{kind: 'b', data: []byte{1, 2, 3}},
		cell{kind: 'u'},
		cell{kind: 't', data: []byte(`{"total": 42}`)},
	)
	want, err := pglogrepl.Parse(msg)
	if err != nil {
		t.Fatal(err)
	}
	ins := want.(*pglogrepl.InsertMessage)
	scratch := make([]cell, 0, 2) // too small: parseInsert grows it
	rel, cells, err := parseInsert(msg, scratch)
	if err != nil {
		t.Fatal(err)
	}
	if rel != ins.RelationID || len(cells) != len(ins.Tuple.Columns) {
		t.Fatalf("relation %d with %d columns, want %d with %d", rel, len(cells), ins.RelationID, len(ins.Tuple.Columns))
	}
	for i, c := range ins.Tuple.Columns {
		if cells[i].kind != c.DataType || !bytes.Equal(cells[i].data, c.Data) {
			t.Errorf("column %d: %q %q, want %q %q", i, cells[i].kind, cells[i].data, c.DataType, c.Data)
		}
	}
	// Reused: the next row overwrites the cells of the last.
	_, again, err := parseInsert(insertMessage(7, cell{kind: 'n'}), cells)
	if err != nil || len(again) != 1 || &again[0] != &cells[0] {
		t.Fatalf("second row: %v, %d cells, same array %v", err, len(again), len(again) > 0 && &again[0] == &cells[0])
	}
}

func TestParseInsertRejectsMalformedMessages(t *testing.T) {
	msg := insertMessage(1, cell{kind: 't', data: []byte("abc")}, cell{kind: 'n'}, cell{kind: 't', data: []byte("payload")})
	// Every truncation is an error, never a panic or a short row.
	for n := 0; n < len(msg); n++ {
		if _, cells, err := parseInsert(msg[:n], nil); err == nil {
			t.Errorf("message cut at %d of %d bytes: parsed %d cells, want an error", n, len(msg), len(cells))
		}
	}
	bad := map[string][]byte{
		"tuple marked": append(append([]byte{}, msg[:5]...), append([]byte{'K'}, msg[6:]...)...),
		"unknown kind": insertMessage(1, cell{kind: 'x'}),
		"bytes after":  append(append([]byte{}, msg...), 0),
		"too short":    {'U', 0, 0, 0, 1, 'N', 0, 0},
		"bytes announced": func() []byte {
			m := insertMessage(1, cell{kind: 't', data: []byte("abc")})
			binary.BigEndian.PutUint32(m[9:], 1<<31)
			return m
		}(),
	}
	for want, m := range bad {
		_, _, err := parseInsert(m, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", m, err, want)
		}
	}
}
