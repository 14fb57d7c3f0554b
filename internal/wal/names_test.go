package wal

import (
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/ident"
)

func namesOf(t *testing.T, schema, table string) Names {
	t.Helper()
	in, err := ident.New(schema, table)
	if err != nil {
		t.Fatal(err)
	}
	return NamesFor(in)
}

func TestNames(t *testing.T) {
	if n := namesOf(t, "", ""); n.Slot != "pgoutbox_outbox_events" || n.QPublication != `"pgoutbox_outbox_events"` {
		t.Fatalf("default table: %+v", n)
	}
	long := strings.Repeat("x", 49) // the longest table name ident accepts with its derived names
	seen := map[string]string{}
	for _, c := range []struct{ schema, table string }{
		{"", "outbox_events"}, {"", "Outbox_Events"}, {"", "outbox events"}, {"", "outbox.events"},
		{"a", "b"}, {"A", "b"}, {"a.b", "c"}, {"a", "b.c"}, {"", "a_b"}, {"a", "b_c"},
		{"", long}, {long, long}, {long, long[:48] + "y"}, {"", "événements"}, {"sch\"ema", `ta'ble`},
	} {
		n := namesOf(t, c.schema, c.table)
		if !validSlotName(n.Slot) {
			t.Errorf("%q.%q: slot %q is not a valid slot name", c.schema, c.table, n.Slot)
		}
		if n.Slot != namesOf(t, c.schema, c.table).Slot {
			t.Errorf("%q.%q: names are not deterministic", c.schema, c.table)
		}
		if !strings.HasPrefix(n.Slot, namePrefix) || n.Publication != n.Slot || n.QPublication != ident.Quote(n.Slot) {
			t.Errorf("%q.%q: %+v", c.schema, c.table, n)
		}
		key := c.schema + "." + c.table
		if other, dup := seen[n.Slot]; dup {
			t.Errorf("%s and %s share slot %s", key, other, n.Slot)
		}
		seen[n.Slot] = key
	}
}

func TestScriptQuotes(t *testing.T) {
	n := namesOf(t, "My Schema", `ta"ble`)
	s := n.Script()
	for _, want := range []string{
		`CREATE PUBLICATION "` + n.Slot + `" FOR TABLE "My Schema"."ta""ble" WITH (publish = 'insert', publish_via_partition_root = true);`,
		`SELECT pg_create_logical_replication_slot('` + n.Slot + `', 'pgoutput');`,
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
