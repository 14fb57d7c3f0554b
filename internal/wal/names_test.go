package wal

import (
	"context"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func namesOf(t *testing.T, schema, table string) Names {
	t.Helper()
	in, err := ident.New(schema, table)
	if err != nil {
		t.Fatal(err)
	}
	return NamesFor(in, "test")
}

func TestNames(t *testing.T) {
	if n := namesOf(t, "", ""); n.LegacySlot != "pgoutbox_outbox_events" || n.QPublication != `"pgoutbox_outbox_events"` ||
		n.Slot == n.LegacySlot || !strings.HasPrefix(n.Slot, "pgoutbox_test_outbox_events_") {
		t.Fatalf("default table: %+v", n)
	}
	long := strings.Repeat("x", 49) // the longest table name ident accepts with its derived names
	seen := map[string]string{}
	for _, db := range []string{"test", "test2", "Test", "t_e", "bücher", strings.Repeat("d", 63)} {
		for _, c := range []struct{ schema, table string }{
			{"", "outbox_events"}, {"", "Outbox_Events"}, {"", "outbox events"}, {"", "outbox.events"},
			{"a", "b"}, {"A", "b"}, {"a.b", "c"}, {"a", "b.c"}, {"", "a_b"}, {"a", "b_c"}, {"e_a", "b"},
			{"", long}, {long, long}, {long, long[:48] + "y"}, {"", "événements"}, {"sch\"ema", `ta'ble`},
		} {
			in, err := ident.New(c.schema, c.table)
			if err != nil {
				t.Fatal(err)
			}
			n := NamesFor(in, db)
			key := db + "/" + c.schema + "." + c.table
			if !validSlotName(n.Slot) || !validSlotName(n.LegacySlot) {
				t.Errorf("%s: slot %q or %q is not a valid slot name", key, n.Slot, n.LegacySlot)
			}
			if n.Slot != NamesFor(in, db).Slot {
				t.Errorf("%s: names are not deterministic", key)
			}
			if !strings.HasPrefix(n.Slot, namePrefix) || n.Publication != n.LegacySlot || n.QPublication != ident.Quote(n.Publication) {
				t.Errorf("%s: %+v", key, n)
			}
			if other, dup := seen[n.Slot]; dup {
				t.Errorf("%s and %s share slot %s", key, other, n.Slot)
			}
			seen[n.Slot] = key
		}
	}
}

func TestScriptQuotes(t *testing.T) {
	n := namesOf(t, "My Schema", `ta"ble`)
	s := n.Script()
	for _, want := range []string{
		`CREATE PUBLICATION "` + n.Publication + `" FOR TABLE "My Schema"."ta""ble" WITH (publish = 'insert', publish_via_partition_root = true);`,
		`SELECT pg_create_logical_replication_slot(left('pgoutbox_' || regexp_replace(translate(current_database()`,
		"rds.logical_replication", "cloudsql.logical_decoding", "max_slot_wal_keep_size",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q:\n%s", want, s)
		}
	}
	if strings.Index(s, "CREATE PUBLICATION") > strings.Index(s, "pg_create_logical_replication_slot") {
		t.Errorf("the slot is created before the publication:\n%s", s)
	}
}

// TestSlotNameSQL: the script's slot name, computed by the server, is the
// one the relay computes, for names that need sanitizing and cutting.
func TestSlotNameSQL(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	ctx := context.Background()
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ schema, table string }{
		{"", "outbox_events"}, {"My Schema", `ta"ble`}, {"", "Événements"}, {"a.b", "c"},
		{strings.Repeat("s", 49), strings.Repeat("x", 49)},
	} {
		in, err := ident.New(c.schema, c.table)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := pool.QueryRow(ctx, "SELECT "+slotNameSQL(c.schema, c.table)).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := NamesFor(in, db).Slot; got != want {
			t.Errorf("%q.%q: the server computes %q, the relay %q", c.schema, c.table, got, want)
		}
	}
}

// TestCreateSlotQueryFailover: slots are created with the failover option
// from PostgreSQL 17 on, and without it before, where the function takes
// two arguments (PostgreSQL 15 answers 42883 to the five-argument form).
func TestCreateSlotQueryFailover(t *testing.T) {
	for _, c := range []struct {
		version  int
		failover bool
	}{{150020, false}, {160000, false}, {170000, true}, {180001, true}} {
		q := createSlotQuery(c.version)
		if got := strings.HasSuffix(q, ", false, false, true)"); got != c.failover {
			t.Errorf("server %d: %s, want failover %v", c.version, q, c.failover)
		}
	}
}
