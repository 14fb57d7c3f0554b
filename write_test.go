package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func TestWriteCommitAndRollback(t *testing.T) {
	e := setup(t)
	var committed []uuid.UUID
	err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
		var err error
		committed, err = e.writer.Write(ctx(t), tx, event("1", 1))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rolledBack := errors.New("business rule failed")
	err = pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
		if _, err := e.writer.Write(ctx(t), tx, event("2", 2)); err != nil {
			return err
		}
		return rolledBack
	})
	if !errors.Is(err, rolledBack) {
		t.Fatalf("err = %v", err)
	}
	if n := e.count("true"); n != 1 {
		t.Fatalf("table holds %d rows, want only the committed one", n)
	}
	var id uuid.UUID
	var aggID string
	if err := e.pool.QueryRow(ctx(t), "SELECT id, aggregate_id FROM outbox_events").Scan(&id, &aggID); err != nil {
		t.Fatal(err)
	}
	if id != committed[0] || aggID != "1" {
		t.Errorf("row = %s/%s, want %s/1", id, aggID, committed[0])
	}
	if committed[0].Version() != 7 {
		t.Errorf("generated id %s is UUID version %d, want 7", committed[0], committed[0].Version())
	}
}

func TestWriteSQLWithDatabaseSQL(t *testing.T) {
	e := setup(t)
	db, err := sql.Open("pgx", testdb.URL()+"&search_path="+e.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	tx, err := db.BeginTx(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := e.writer.WriteSQL(ctx(t), tx, event("a", 1), event("b", 2), outbox.Event{
		AggregateType: "order", AggregateID: "c", EventType: "order.paid",
		Payload: []byte(`{"x":1}`), Headers: map[string]string{"traceparent": "00-abc-def-01"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("got %d ids", len(ids))
	}
	var headers string
	if err := e.pool.QueryRow(ctx(t), "SELECT headers::text FROM outbox_events WHERE id = $1", ids[2]).Scan(&headers); err != nil {
		t.Fatal(err)
	}
	if headers != `{"traceparent": "00-abc-def-01"}` {
		t.Errorf("headers = %s", headers)
	}

	tx, err = db.BeginTx(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.writer.WriteSQL(ctx(t), tx, event("d", 4)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := e.count("true"); n != 3 {
		t.Errorf("table holds %d rows after a rollback, want 3", n)
	}
}

// TestWriteManyIsOneRoundTrip checks that many events cost one statement: the
// server sees a single INSERT, and a batch over the bind-parameter limit is
// split but still all lands.
func TestWriteManyEvents(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(12000) // > 65535/6 events: needs two statements
	if len(ids) != 12000 {
		t.Fatalf("got %d ids", len(ids))
	}
	if n := e.count("true"); n != 12000 {
		t.Fatalf("table holds %d rows, want 12000", n)
	}
	// Insertion order is the call's order.
	rows, err := e.pool.Query(ctx(t), "SELECT id FROM outbox_events ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("row %d by seq is %s, want %s", i, got[i], ids[i])
		}
	}
}

func TestWriteOneStatement(t *testing.T) {
	e := setup(t)
	var statements int
	tracer := &countingTracer{n: &statements}
	conn, err := pgx.ConnectConfig(ctx(t), func() *pgx.ConnConfig {
		c, _ := pgx.ParseConfig(testdb.URL())
		c.Tracer = tracer
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx(t))
	tx, err := conn.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	statements = 0
	evs := make([]outbox.Event, 100)
	for i := range evs {
		evs[i] = event(fmt.Sprint(i), i)
	}
	if _, err := e.writer.Write(ctx(t), tx, evs...); err != nil {
		t.Fatal(err)
	}
	if statements != 1 {
		t.Errorf("100 events took %d statements, want 1", statements)
	}
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestWriteValidation(t *testing.T) {
	e := setup(t)
	long := strings.Repeat("x", 101)
	cases := []struct {
		name  string
		ev    outbox.Event
		field string
	}{
		{"empty aggregate type", outbox.Event{AggregateID: "1", EventType: "e", Payload: []byte(`{}`)}, "aggregate_type"},
		{"empty aggregate id", outbox.Event{AggregateType: "o", EventType: "e", Payload: []byte(`{}`)}, "aggregate_id"},
		{"empty event type", outbox.Event{AggregateType: "o", AggregateID: "1", Payload: []byte(`{}`)}, "event_type"},
		{"aggregate type too long", outbox.Event{AggregateType: long, AggregateID: "1", EventType: "e", Payload: []byte(`{}`)}, "aggregate_type"},
		{"aggregate id too long", outbox.Event{AggregateType: "o", AggregateID: long, EventType: "e", Payload: []byte(`{}`)}, "aggregate_id"},
		{"event type too long", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: long, Payload: []byte(`{}`)}, "event_type"},
		{"control char in event type", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "a\nb", Payload: []byte(`{}`)}, "event_type"},
		{"invalid utf-8", outbox.Event{AggregateType: "o", AggregateID: "\xff", EventType: "e", Payload: []byte(`{}`)}, "aggregate_id"},
		{"empty payload", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e"}, "payload"},
		{"invalid json", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: []byte(`{"a":`)}, "payload"},
		{"NUL escape", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: []byte(`{"a":"x\u0000y"}`)}, "payload"},
		{"control char in header value", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: []byte(`{}`), Headers: map[string]string{"k": "v\r\nX-Evil: 1"}}, "headers"},
		{"control char in header key", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: []byte(`{}`), Headers: map[string]string{"k\x00": "v"}}, "headers"},
		{"empty header key", outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: []byte(`{}`), Headers: map[string]string{"": "v"}}, "headers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
				// A valid event first: the invalid one must fail the whole call
				// without aborting the caller's transaction.
				_, err := e.writer.Write(ctx(t), tx, event("ok", 0), c.ev)
				var ve *outbox.ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("err = %v, want a *ValidationError", err)
				}
				if ve.Field != c.field || ve.Index != 1 {
					t.Errorf("error names field %q at index %d, want %q at 1: %v", ve.Field, ve.Index, c.field, err)
				}
				if !strings.Contains(err.Error(), c.field) {
					t.Errorf("message %q does not name %s", err, c.field)
				}
				// The transaction is still usable.
				_, err = e.writer.Write(ctx(t), tx, event("after", 1))
				return err
			})
			if err != nil {
				t.Fatalf("transaction unusable after a validation error: %v", err)
			}
		})
	}
	// An escaped backslash followed by u0000 is legal JSON text and storable.
	ok := outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: []byte(`{"path":"C:\\u0000"}`)}
	if err := ok.Validate(); err != nil {
		t.Errorf("escaped backslash rejected: %v", err)
	}
	err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
		_, err := e.writer.Write(ctx(t), tx, ok)
		return err
	})
	if err != nil {
		t.Errorf("PostgreSQL refused what Validate accepted: %v", err)
	}
}

func TestWriteCallerSetIDIsIdempotencyKey(t *testing.T) {
	e := setup(t)
	ev := event("1", 1)
	ev.ID = uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	for i := range 2 {
		err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
			ids, err := e.writer.Write(ctx(t), tx, ev)
			if err == nil && ids[0] != ev.ID {
				t.Errorf("returned id %s, want the caller's %s", ids[0], ev.ID)
			}
			return err
		})
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 1 && err == nil {
			t.Fatal("second insert of the same id succeeded")
		}
	}
}

// TestWriteRejectsTextPostgreSQLCannotStore: Go's json.Valid accepts invalid
// UTF-8 and lone UTF-16 surrogate escapes, which jsonb refuses with an error
// that aborts the caller's transaction. Validation refuses them first, naming
// the field, and the caller's transaction (pgx or database/sql) goes on.
func TestWriteRejectsTextPostgreSQLCannotStore(t *testing.T) {
	e := setup(t)
	db, err := sql.Open("pgx", testdb.URL()+"&search_path="+e.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ev := func(payload string, headers map[string]string) outbox.Event {
		return outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: []byte(payload), Headers: headers}
	}
	bad := []struct {
		name  string
		ev    outbox.Event
		field string
	}{
		{"invalid UTF-8 in a string", ev(`{"a":"`+"\xff"+`"}`, nil), "payload"},
		{"UTF-8-encoded surrogate", ev(`{"a":"`+"\xed\xa0\x80"+`"}`, nil), "payload"},
		{"invalid UTF-8 in a key", ev(`{"`+"\xc3"+`":1}`, nil), "payload"},
		{"lone high surrogate escape", ev(`{"a":"\ud800"}`, nil), "payload"},
		{"lone high surrogate escape at the end", ev(`["x\uD800"]`, nil), "payload"},
		{"lone low surrogate escape", ev(`{"a":"\udc00"}`, nil), "payload"},
		{"high surrogate before a non-surrogate", ev(`{"a":"\ud800\u0041"}`, nil), "payload"},
		{"two high surrogates", ev(`{"a":"\ud800\ud800"}`, nil), "payload"},
		{"surrogate escape in a key", ev(`{"\ud800":1}`, nil), "payload"},
		{"invalid UTF-8 in a header value", ev(`{}`, map[string]string{"k": "\xff"}), "headers"},
		{"invalid UTF-8 in a header key", ev(`{}`, map[string]string{"k\xff": "v"}), "headers"},
	}
	good := []outbox.Event{
		ev(`{"smile":"\ud83d\ude00","SMILE":"\uD83D\uDE00"}`, nil),
		ev(`{"not an escape":"\\ud800"}`, nil),
		ev(`{"é":"日本"}`, map[string]string{"clé": "valeur ☃"}),
	}
	drivers := map[string]func(t *testing.T, events ...outbox.Event) (first, second error){
		"pgx": func(t *testing.T, events ...outbox.Event) (error, error) {
			var first error
			second := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
				_, first = e.writer.Write(ctx(t), tx, events...)
				_, err := e.writer.Write(ctx(t), tx, event("after", 1))
				return err
			})
			return first, second
		},
		"database/sql": func(t *testing.T, events ...outbox.Event) (error, error) {
			tx, err := db.BeginTx(ctx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback() //nolint:errcheck // no-op after commit
			_, first := e.writer.WriteSQL(ctx(t), tx, events...)
			if _, err := e.writer.WriteSQL(ctx(t), tx, event("after", 1)); err != nil {
				return first, err
			}
			return first, tx.Commit()
		},
	}
	for driver, write := range drivers {
		for _, c := range bad {
			t.Run(driver+"/"+c.name, func(t *testing.T) {
				first, second := write(t, event("ok", 0), c.ev)
				var ve *outbox.ValidationError
				if !errors.As(first, &ve) {
					t.Fatalf("err = %v, want a *ValidationError", first)
				}
				if ve.Field != c.field || ve.Index != 1 {
					t.Errorf("error names field %q at index %d, want %q at 1: %v", ve.Field, ve.Index, c.field, first)
				}
				if second != nil {
					t.Errorf("the caller's transaction is unusable after the refused write: %v", second)
				}
			})
		}
		t.Run(driver+"/storable text", func(t *testing.T) {
			first, second := write(t, good...)
			if first != nil || second != nil {
				t.Errorf("write = %v, then %v; want text PostgreSQL stores accepted", first, second)
			}
		})
	}
}

// FuzzPayloadValidationAgreesWithJSONB: for any text json.Valid accepts,
// Event.Validate accepts the payload exactly when PostgreSQL's jsonb does, so
// what validation lets through never aborts the caller's transaction. The
// seeds run with every go test; go test -fuzz explores further.
func FuzzPayloadValidationAgreesWithJSONB(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud800"}`, `{"a":"\udc00x"}`, `["\ud800\u0041"]`,
		`{"a":"\\ud800"}`, `{"a":"x\u0000"}`, `{"a":"\\u0000"}`, "{\"a\":\"\xff\"}", "[\"\xed\xa0\x80\"]",
		`"\uDBFF\uDFFF"`, `"\u00e9\t\n"`, `[1e400]`, `{"a":1,"a":2}`,
	} {
		f.Add([]byte(s))
	}
	pool := testdb.Pool(f, "")
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !json.Valid(payload) {
			return
		}
		ev := outbox.Event{AggregateType: "o", AggregateID: "1", EventType: "e", Payload: payload}
		verr := ev.Validate()
		var dummy string
		dberr := pool.QueryRow(context.Background(), `SELECT $1::jsonb::text`, string(payload)).Scan(&dummy)
		if (verr == nil) != (dberr == nil) {
			t.Errorf("payload %q: Validate = %v, jsonb = %v", payload, verr, dberr)
		}
	})
}

// TestWriteMaxPayloadBytes: an event over the Writer's size limit is refused
// before the database is touched (the caller's transaction goes on), with an
// error naming the event, its size and the limit; the default fits NATS's
// default max_payload; a negative limit disables the check.
func TestWriteMaxPayloadBytes(t *testing.T) {
	e := setup(t)
	sized := func(n int, headers map[string]string) outbox.Event {
		return outbox.Event{AggregateType: "a", AggregateID: "1", EventType: "t", Headers: headers,
			Payload: []byte(`"` + strings.Repeat("x", n-2) + `"`)}
	}
	writer := func(limit int) *outbox.Writer {
		w, err := outbox.NewWriter(outbox.WriterConfig{Schema: e.schema, MaxPayloadBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// write writes evs then one small event in one transaction and returns
	// the first write's error; the second write must succeed.
	write := func(t *testing.T, w *outbox.Writer, evs ...outbox.Event) error {
		t.Helper()
		var first error
		err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
			_, first = w.Write(ctx(t), tx, evs...)
			_, err := w.Write(ctx(t), tx, sized(10, nil))
			return err
		})
		if err != nil {
			t.Fatalf("the caller's transaction is unusable after the refused write: %v", err)
		}
		return first
	}
	t.Run("over the limit", func(t *testing.T) {
		err := write(t, writer(1000), sized(10, nil), sized(1001, nil))
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || ve.Index != 1 || ve.Field != "payload" {
			t.Fatalf("err = %v, want a *ValidationError for event 1's payload", err)
		}
		for _, want := range []string{"event 1", "1001 bytes", "limit of 1000", "MaxPayloadBytes"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})
	t.Run("headers count", func(t *testing.T) {
		err := write(t, writer(1000), sized(990, map[string]string{"k": "0123456789"}))
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "1001 bytes") {
			t.Fatalf("err = %v, want the payload plus headers (1001 bytes) refused", err)
		}
	})
	t.Run("at the limit", func(t *testing.T) {
		if err := write(t, writer(1000), sized(1000, nil)); err != nil {
			t.Fatalf("an event of exactly the limit: %v", err)
		}
	})
	t.Run("default", func(t *testing.T) {
		if outbox.DefaultMaxPayloadBytes > 1<<20 || outbox.DefaultMaxPayloadBytes < 1<<19 {
			t.Fatalf("DefaultMaxPayloadBytes = %d, want under NATS's default max_payload (1 MiB)", outbox.DefaultMaxPayloadBytes)
		}
		if err := write(t, writer(0), sized(outbox.DefaultMaxPayloadBytes+1, nil)); err == nil {
			t.Fatal("the default Writer accepted an event over DefaultMaxPayloadBytes")
		}
		if err := write(t, writer(0), sized(outbox.DefaultMaxPayloadBytes, nil)); err != nil {
			t.Fatalf("the default Writer refused an event of DefaultMaxPayloadBytes: %v", err)
		}
		big := sized(outbox.DefaultMaxPayloadBytes+1, nil)
		if err := big.Validate(); err == nil {
			t.Fatal("Event.Validate accepted an event over DefaultMaxPayloadBytes")
		}
	})
	t.Run("no limit", func(t *testing.T) {
		if err := write(t, writer(-1), sized(2<<20, nil)); err != nil {
			t.Fatalf("MaxPayloadBytes -1 refused a 2 MiB event: %v", err)
		}
	})
}
