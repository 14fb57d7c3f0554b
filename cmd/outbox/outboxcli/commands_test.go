package outboxcli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("t") // migrate creates it
	t.Cleanup(func() { testdb.Drop(t, schema) })
	all, err := outbox.Migrations(outbox.MigrateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	latest := all[len(all)-1]

	r := run(t, dbEnv(), "migrate", "status", "--schema", schema)
	wantExit(t, r, ExitOK)
	if strings.Count(r.stdout, "pending") != len(all)+1 || !strings.Contains(r.stdout, "run outbox migrate") {
		t.Errorf("migrate status before migrating:\n%s", r)
	}

	r = run(t, dbEnv(), "migrate", "--schema", schema)
	wantExit(t, r, ExitOK)
	for _, m := range all {
		if want := fmt.Sprintf(`applied %03d_%s to "%s"."outbox_events"`, m.Version, m.Name, schema); !strings.Contains(r.stdout, want) {
			t.Errorf("migrate output lacks %q:\n%s", want, r)
		}
	}

	r = run(t, dbEnv(), "migrate", "up", "--schema", schema)
	wantExit(t, r, ExitOK)
	if want := fmt.Sprintf(`"%s"."outbox_events" is up to date (version %d)`, schema, latest.Version); strings.TrimSpace(r.stdout) != want {
		t.Errorf("second migrate: got %q, want %q", r.stdout, want)
	}

	r = run(t, dbEnv(), "migrate", "status", "--schema", schema, "--json")
	wantExit(t, r, ExitOK)
	var st struct {
		Table      string
		Migrations []migrationJSON
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("migrate status --json: %v\n%s", err, r)
	}
	if len(st.Migrations) != len(all) {
		t.Fatalf("migrate status --json lists %d migrations, want %d", len(st.Migrations), len(all))
	}
	for _, m := range st.Migrations {
		if m.AppliedAt == nil {
			t.Errorf("migration %d not applied after migrate", m.Version)
		}
	}
}

// migrate sql needs no database: it prints the script for the configured
// schema and table.
func TestMigrateSQL(t *testing.T) {
	t.Parallel()
	noDB := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none"}
	r := run(t, noDB, "migrate", "sql", "--schema", "billing", "--table", "events")
	wantExit(t, r, ExitOK)
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS "billing"`, `CREATE TABLE IF NOT EXISTS "billing"."events"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate sql lacks %q:\n%s", want, r.stdout)
		}
	}
	want, err := outbox.MigrationSQL(outbox.MigrateConfig{Schema: "billing", Table: "events"})
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != want {
		t.Errorf("migrate sql differs from outbox.MigrationSQL")
	}
	if p := run(t, noDB, "migrate", "--print", "--schema", "billing", "--table", "events"); p.stdout != r.stdout || p.code != 0 {
		t.Errorf("migrate --print differs from migrate sql:\n%s", p)
	}
}

// Every command that reads the table says "run outbox migrate", with exit
// code 4, when the table is missing.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t) // empty
	for _, args := range [][]string{
		{"status"}, {"dead-letters"}, {"retry", "--all"}, {"cleanup", "--retention", "1h"},
		{"relay", "--broker", "stdout:"},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			r := run(t, dbEnv(), append(args, "--schema", schema)...)
			wantExit(t, r, ExitNotMigrated)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n") // the relay logs it first
			if want := `outbox: table "` + schema + `"."outbox_events" is missing or not migrated: run outbox migrate --schema ` + schema; lines[len(lines)-1] != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
			}
		})
	}
}

func TestDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/test?connect_timeout=5"}
	for _, args := range [][]string{
		{"status"}, {"migrate"}, {"migrate", "status"}, {"dead-letters", "--json"}, {"retry", "--all"},
		{"cleanup", "--retention", "1h"},
	} { // the relay waits, or logs the failure: TestRelayWaitsForDatabase
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := run(t, vars, args...)
			wantExit(t, r, ExitDatabase)
			if !strings.HasPrefix(r.stderr, "outbox: database unreachable: ") || !strings.Contains(r.stderr, "connection refused") {
				t.Errorf("stderr: %s", r.stderr)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	f := setup(t)
	created := f.write("order.created", 4)
	paid := f.write("order.paid", 2)
	f.exec(`UPDATE outbox_events SET processed_at = now() WHERE id = $1`, created[0])
	f.deadLetter(paid[:1], "boom")
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema

	r := run(t, vars, "status")
	wantExit(t, r, ExitOK)
	for _, re := range []string{
		`pending\s+4 \(oldest \d`,
		`dead letters\s+1\n`,
		`published\s+1 in the last minute, 1 in the last hour`,
		`order.created\s+3\s+\S+\s+0\s+1\s+1`,
		`order.paid\s+1\s+\S+\s+1\s+0\s+0`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("status output does not match %q:\n%s", re, r.stdout)
		}
	}

	r = run(t, vars, "status", "--json")
	wantExit(t, r, ExitOK)
	var st struct {
		Table string `json:"table"`
		admin.Status
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.Pending != 4 || st.DeadLetters != 1 || st.PublishedLastMinute != 1 || len(st.ByType) != 2 || st.OldestPendingAgeSeconds <= 0 {
		t.Errorf("status --json: %+v", st)
	}
	if st.Table != `"`+f.schema+`"."outbox_events"` {
		t.Errorf("status --json table %q", st.Table)
	}
}

func TestDeadLetters(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	r := run(t, vars, "dead-letters")
	wantExit(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, "no dead letters in ") {
		t.Errorf("empty: %s", r)
	}

	a := f.write("a.happened", 2)
	b := f.write("b.happened", 1)
	f.write("c.pending", 1)
	f.deadLetter(a, "nats: no responders\nsecond line")
	f.deadLetter(b, "boom")
	f.exec(`UPDATE outbox_events SET created_at = now() - interval '2 hours' WHERE id = $1`, b[0])

	r = run(t, vars, "dead-letters")
	wantExit(t, r, ExitOK)
	for _, id := range append(a, b...) {
		if !strings.Contains(r.stdout, id.String()) {
			t.Errorf("dead-letters lacks %s:\n%s", id, r.stdout)
		}
	}
	for _, want := range []string{"a.happened", "order/o-0", "nats: no responders; second line", "3 dead letter(s)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dead-letters lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "PAYLOAD-MARKER") || strings.Contains(r.stdout, "c.pending") {
		t.Errorf("dead-letters shows a payload or a pending event:\n%s", r.stdout)
	}
	r = run(t, vars, "dead-letters", "--show-payload")
	if !strings.Contains(r.stdout, "PAYLOAD-MARKER") {
		t.Errorf("dead-letters --show-payload lacks the payload:\n%s", r.stdout)
	}

	decode := func(r result) []deadLetterJSON {
		t.Helper()
		wantExit(t, r, ExitOK)
		var out []deadLetterJSON
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("--json: %v\n%s", err, r.stdout)
		}
		return out
	}
	got := decode(run(t, vars, "dead-letters", "--json"))
	if len(got) != 3 || got[0].Attempts != 10 || got[0].LastError != "nats: no responders\nsecond line" || got[0].DeadAt == nil {
		t.Errorf("--json: %+v", got)
	}
	if strings.Contains(run(t, vars, "dead-letters", "--json").stdout, "PAYLOAD-MARKER") {
		t.Error("--json shows payloads without --show-payload")
	}
	if got := decode(run(t, vars, "dead-letters", "--json", "--show-payload")); len(got) != 3 || !strings.Contains(string(got[0].Payload), "PAYLOAD-MARKER") {
		t.Errorf("--json --show-payload: %+v", got)
	}
	if got := decode(run(t, vars, "dead-letters", "--json", "--type", "b.happened")); len(got) != 1 || got[0].ID != b[0].String() {
		t.Errorf("--type b.happened: %+v", got)
	}
	if got := decode(run(t, vars, "dead-letters", "--json", "--older-than", "1h")); len(got) != 1 || got[0].ID != b[0].String() {
		t.Errorf("--older-than 1h: %+v", got)
	}
	r = run(t, vars, "dead-letters", "--json", "--limit", "2")
	if got := decode(r); len(got) != 2 || !strings.Contains(r.stderr, "showing the first 2") {
		t.Errorf("--limit 2: %d entries, stderr %q", len(got), r.stderr)
	}
}

func TestRetry(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	a := f.write("a.happened", 3)
	b := f.write("b.happened", 2)
	f.deadLetter(append(a, b...), "boom")
	requeued := func() int { return f.count("dead_at IS NULL AND attempts = 0 AND retry_after <= now()") }

	r := run(t, vars, "retry", "--type", "a.happened", "--dry-run")
	wantExit(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, "dry run: would re-queue 3 event(s)") || requeued() != 0 {
		t.Errorf("dry run: %s; %d rows changed", r, requeued())
	}
	r = run(t, vars, "retry", "--type", "a.happened")
	wantExit(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, `re-queued 3 event(s) in "`+f.schema+`"."outbox_events"`) || requeued() != 3 {
		t.Errorf("retry --type: %s; %d rows re-queued", r, requeued())
	}
	// Ids, with a flag after them and an unknown id.
	r = run(t, vars, "retry", b[0].String(), uuid.NewString(), "--dry-run")
	if r.code != ExitNotFound || !strings.HasPrefix(r.stdout, "dry run: would re-queue 1 event(s)") || !strings.Contains(r.stderr, "1 id(s) unknown or already published") {
		t.Errorf("retry ids --dry-run: %s", r)
	}
	r = run(t, vars, "retry", b[0].String())
	if !strings.HasPrefix(r.stdout, "re-queued 1 event(s)") || requeued() != 4 {
		t.Errorf("retry id: %s; %d re-queued", r, requeued())
	}
	// A published event is never re-queued.
	f.exec(`UPDATE outbox_events SET processed_at = now() WHERE id = $1`, a[0])
	r = run(t, vars, "retry", a[0].String())
	if r.code != ExitNotFound || !strings.HasPrefix(r.stdout, "re-queued 0 event(s)") || !strings.Contains(r.stderr, a[0].String()) {
		t.Errorf("retry of a published event: %s", r)
	}
	r = run(t, vars, "retry", "--all")
	wantExit(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, "re-queued 1 event(s)") || f.count("dead_at IS NOT NULL") != 0 {
		t.Errorf("retry --all: %s", r)
	}
}

func TestCleanup(t *testing.T) {
	f := setup(t)
	f.write("old", 25)
	f.exec(`UPDATE outbox_events SET processed_at = now() - interval '2 hours'`)
	recent := f.write("recent", 5)
	f.exec(`UPDATE outbox_events SET processed_at = now() WHERE id = ANY($1)`, recent)
	dead := f.write("dead", 2)
	f.deadLetter(dead, "boom")
	f.exec(`UPDATE outbox_events SET created_at = now() - interval '3 hours' WHERE id = ANY($1)`, dead)
	f.write("pending", 3)

	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	vars["OUTBOX_RETENTION"] = "1h" // as a relay's config would set it
	r := run(t, vars, "cleanup", "--cleanup-batch", "10")
	wantExit(t, r, ExitOK)
	for _, want := range []string{"cleanup: deleted 10 so far", "cleanup: deleted 20 so far", "cleanup: deleted 25 so far",
		`deleted 25 event(s) published more than 1h0m0s ago from "` + f.schema + `"."outbox_events"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("cleanup output lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := f.count("true"); n != 10 {
		t.Errorf("%d rows left, want 10 (5 recent, 2 dead letters, 3 pending)", n)
	}
	r = run(t, vars, "cleanup")
	if !strings.Contains(r.stdout, "deleted 0 event(s)") {
		t.Errorf("second cleanup: %s", r)
	}
}
