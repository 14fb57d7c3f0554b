package inbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func TestMigrateIsRerunnableAndRecorded(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, "")
	cfg := inbox.MigrateConfig{Schema: schema}
	// The outbox shares the bookkeeping table under its own target.
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	applied, err := inbox.Migrate(ctx(t), pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0].Version != 1 || applied[0].Name != "processed_events" {
		t.Fatalf("applied = %+v, want 001_processed_events", applied)
	}
	again, err := inbox.Migrate(ctx(t), pool, cfg)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %+v, %v; want nothing to do", again, err)
	}
	var target, name string
	var version int
	err = pool.QueryRow(ctx(t), `SELECT target, version, name FROM `+pgx.Identifier{schema, "pgoutbox_migrations"}.Sanitize()+
		` WHERE target LIKE 'inbox:%'`).Scan(&target, &version, &name)
	if err != nil {
		t.Fatal(err)
	}
	if target != "inbox:"+schema+".processed_events" || version != 1 || name != "processed_events" {
		t.Errorf("bookkeeping row = (%s, %d, %s)", target, version, name)
	}
	// The table has the documented shape: primary key (consumer, event_id) and
	// the retention index.
	var def string
	err = pool.QueryRow(ctx(t), `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
		JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = $1 AND t.relname = 'processed_events' AND c.contype = 'p'`, schema).Scan(&def)
	if err != nil || def != "PRIMARY KEY (consumer, event_id)" {
		t.Errorf("primary key = %q, %v", def, err)
	}
	err = pool.QueryRow(ctx(t), `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'processed_events_processed_at_idx'`, schema).Scan(&def)
	if err != nil || !strings.Contains(def, "(consumer, processed_at)") {
		t.Errorf("retention index = %q, %v", def, err)
	}
}

func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("t") // does not exist yet: Migrate creates it
	t.Cleanup(func() { testdb.Drop(t, schema) })
	cfg := inbox.MigrateConfig{Schema: schema, Table: "inbox"}
	var wg sync.WaitGroup
	total := make(chan int, 4)
	for range 4 {
		pool := testdb.Pool(t, "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied, err := inbox.Migrate(ctx(t), pool, cfg)
			if err != nil {
				t.Errorf("Migrate: %v", err)
			}
			total <- len(applied)
		}()
	}
	wg.Wait()
	close(total)
	sum := 0
	for n := range total {
		sum += n
	}
	if sum != 1 {
		t.Errorf("migrations applied across 4 concurrent callers = %d, want 1", sum)
	}
}

func TestMigrateDB(t *testing.T) {
	e := setup(t) // migrated with pgx already
	db := e.sqlDB()
	applied, err := inbox.MigrateDB(ctx(t), db, inbox.MigrateConfig{Schema: e.schema})
	if err != nil || len(applied) != 0 {
		t.Fatalf("MigrateDB on a migrated table = %+v, %v", applied, err)
	}
	applied, err = inbox.MigrateDB(ctx(t), db, inbox.MigrateConfig{Table: "other_inbox"}) // search_path
	if err != nil || len(applied) != 1 {
		t.Fatalf("MigrateDB = %+v, %v", applied, err)
	}
	if n := e.count(`SELECT count(*) FROM other_inbox`); n != 0 {
		t.Errorf("other_inbox rows = %d", n)
	}
}

// The exported script creates the same table; Migrate then adopts it (its
// statements are idempotent) and records the version.
func TestMigrationSQLAdoption(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("t")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	pool := testdb.Pool(t, "")
	script, err := inbox.MigrationSQL(inbox.MigrateConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "CREATE SCHEMA IF NOT EXISTS") || strings.Contains(script, "pgoutbox_migrations") {
		t.Errorf("script:\n%s", script)
	}
	for range 2 { // idempotent
		if _, err := pool.Exec(ctx(t), script); err != nil {
			t.Fatalf("apply script: %v", err)
		}
	}
	applied, err := inbox.Migrate(ctx(t), pool, inbox.MigrateConfig{Schema: schema})
	if err != nil || len(applied) != 1 {
		t.Fatalf("adopt: %+v, %v", applied, err)
	}
	ms, err := inbox.Migrations(inbox.MigrateConfig{Schema: schema})
	if err != nil || len(ms) != 1 || !strings.Contains(script, ms[0].SQL) {
		t.Errorf("Migrations = %+v, %v; want the script's statements", ms, err)
	}
}

// Schema, table and consumer names are data, never SQL.
func TestHostileIdentifiers(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	for _, tc := range []struct{ schema, table, consumer string }{
		{`we"ird; DROP TABLE x; --`, `Processed "Events"`, `'); DROP TABLE effects; --`},
		{"Ünïcödé schéma", "表", "consumer with spaces"},
		{"", `pub lic"."x`, `"`},
	} {
		schema := tc.schema
		if schema == "" {
			schema = testdb.NewSchemaName("t") // the search_path resolves the table
		}
		t.Cleanup(func() { testdb.Drop(t, schema) })
		mcfg := inbox.MigrateConfig{Schema: tc.schema, Table: tc.table}
		p := pool
		if tc.schema == "" {
			if _, err := pool.Exec(ctx(t), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
				t.Fatal(err)
			}
			p = testdb.Pool(t, pgx.Identifier{schema}.Sanitize())
		}
		if _, err := inbox.Migrate(ctx(t), p, mcfg); err != nil {
			t.Fatalf("%+v: Migrate: %v", tc, err)
		}
		in, err := inbox.New(p, inbox.Config{Schema: tc.schema, Table: tc.table, Consumer: tc.consumer})
		if err != nil {
			t.Fatal(err)
		}
		m := msg()
		for i, wantDup := range []bool{false, true} {
			res, err := in.Handle(ctx(t), m, func(context.Context, pgx.Tx) error { return nil })
			if err != nil || res.Duplicate != wantDup {
				t.Fatalf("%+v: delivery %d = %+v, %v", tc, i, res, err)
			}
		}
		var consumer string
		err = p.QueryRow(ctx(t), `SELECT consumer FROM `+pgx.Identifier{schema, tc.table}.Sanitize()).Scan(&consumer)
		if err != nil || consumer != tc.consumer {
			t.Errorf("%+v: stored consumer %q, %v", tc, consumer, err)
		}
		if _, err := p.Exec(ctx(t), `UPDATE `+pgx.Identifier{schema, tc.table}.Sanitize()+` SET processed_at = now() - interval '1 day'`); err != nil {
			t.Fatal(err)
		}
		if n, err := in.Cleanup(ctx(t), time.Hour, 10); err != nil || n != 1 {
			t.Errorf("%+v: Cleanup = %d, %v", tc, n, err)
		}
	}
}

func TestMigrateConfigValidation(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]inbox.MigrateConfig{
		"Table":  {Table: strings.Repeat("x", 64)},
		"Schema": {Schema: "a\x00b"},
	} {
		_, err := inbox.MigrationSQL(cfg)
		configcheck.Refused(t, fmt.Sprintf("MigrationSQL(%+v)", cfg), err, "inbox.MigrateConfig", field)
		if _, err := inbox.Migrate(context.Background(), nil, cfg); err == nil {
			t.Errorf("Migrate(%+v) accepted", cfg)
		}
	}
}

// TestMigrationSQLNames: a name with a newline once escaped a comment line of
// the printed script; it is refused with the field named. A legal odd name
// (quotes, spaces, non-ASCII) yields a script that creates exactly the table
// and its indexes under that name.
func TestMigrationSQLNames(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := pool.Exec(ctx(t), "CREATE TABLE canary (id int)"); err != nil {
		t.Fatal(err)
	}
	hostile := "ev\nDROP TABLE canary; --"
	for _, cfg := range []inbox.MigrateConfig{{Table: hostile}, {Schema: hostile}} {
		script, err := inbox.MigrationSQL(cfg)
		if err == nil {
			_, _ = pool.Exec(ctx(t), script)
			var exists bool
			_ = pool.QueryRow(ctx(t), "SELECT to_regclass('canary') IS NOT NULL").Scan(&exists)
			t.Errorf("MigrationSQL(%+q) accepted the name; after applying its script the canary exists=%v", cfg, exists)
			continue
		}
		want := "MigrateConfig.Table"
		if cfg.Schema != "" {
			want = "MigrateConfig.Schema"
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "control character") {
			t.Errorf("MigrationSQL(%+q) error = %q, want it to name %s and the control character", cfg, err, want)
		}
	}
	for _, cfg := range []inbox.Config{{Table: hostile, Consumer: "c"}, {Schema: hostile, Consumer: "c"}} {
		if _, err := inbox.New(pool, cfg); err == nil {
			t.Errorf("inbox.New(schema %q, table %q) accepted the name", cfg.Schema, cfg.Table)
		}
	}

	odd := `Odd "sch" é ` + testdb.NewSchemaName("s")
	t.Cleanup(func() { testdb.Drop(t, odd) })
	table := `Reçus "vus"; x`
	script, err := inbox.MigrationSQL(inbox.MigrateConfig{Schema: odd, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx(t), script); err != nil {
		t.Fatalf("script: %v\n%s", err, script)
	}
	rows, err := pool.Query(ctx(t), `SELECT c.relname || ' ' || c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1`, odd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{table + " r", table + "_pkey i", table + "_processed_at_idx i"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects in %q:\n%s\nwant:\n%s", odd, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
