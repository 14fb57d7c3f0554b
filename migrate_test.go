package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
)

func TestMigrateConcurrentAndRerunnable(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("mig")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	pool := testdb.Pool(t, "")
	cfg := outbox.MigrateConfig{Schema: schema}

	// Four processes migrating at once: exactly one applies each version.
	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() {
			ms, err := outbox.Migrate(ctx(t), testdb.Pool(t, ""), cfg)
			applied[i], errs[i] = len(ms), err
		})
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
		total += applied[i]
	}
	all, err := outbox.Migrations(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if total != len(all) {
		t.Errorf("concurrent migrators applied %d migrations in all, want %d (each once)", total, len(all))
	}
	// Re-running is a no-op.
	ms, err := outbox.Migrate(ctx(t), pool, cfg)
	if err != nil || len(ms) != 0 {
		t.Errorf("second Migrate applied %d, err %v; want a no-op", len(ms), err)
	}
	st, err := outbox.MigrationStatus(ctx(t), pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if m.AppliedAt == nil {
			t.Errorf("migration %d reported pending after Migrate", m.Version)
		}
	}
}

func TestMigrationStatusOnFreshSchema(t *testing.T) {
	t.Parallel()
	st, err := outbox.MigrationStatus(ctx(t), testdb.Pool(t, ""), outbox.MigrateConfig{Schema: testdb.NewSchemaName("none")})
	if err != nil {
		t.Fatal(err)
	}
	if len(st) == 0 {
		t.Fatal("no migrations listed")
	}
	for _, m := range st {
		if m.AppliedAt != nil {
			t.Errorf("migration %d applied on a schema that does not exist", m.Version)
		}
	}
}

// TestMigrateAdoptsHandMadeTable: a team that created the minimal outbox
// table by hand (the eight columns of migration 1), with rows in it,
// migrates without losing them, and the relay then publishes those rows.
func TestMigrateAdoptsHandMadeTable(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	_, err := pool.Exec(ctx(t), `
CREATE TABLE outbox_events (
    id             UUID         PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ
);
CREATE INDEX idx_outbox_unprocessed ON outbox_events (created_at) WHERE processed_at IS NULL;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', g::text, 'order.created', jsonb_build_object('n', g) FROM generate_series(1, 5) g;`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrating a hand-made table: %v", err)
	}
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.ProcessBatch(ctx(t))
	if err != nil || res.Published != 5 {
		t.Fatalf("batch = %+v, %v; want the 5 pre-existing rows published", res, err)
	}
}

// TestExportedMigrationsUpToDate keeps migrations/ identical to what the
// binary applies, in the one form both goose and golang-migrate read:
// NNN_name.up.sql (golang-migrate's naming; goose takes the number before the
// first underscore) starting with goose's "-- +goose Up" annotation (a plain
// comment to golang-migrate and psql). internal/migratetools runs both tools
// on these files. Run with UPDATE_MIGRATIONS=1 to rewrite them.
func TestExportedMigrationsUpToDate(t *testing.T) {
	t.Parallel()
	ms, err := outbox.Migrations(outbox.MigrateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, m := range ms {
		name := fmt.Sprintf("%03d_%s.up.sql", m.Version, m.Name)
		want[name] = true
		path := filepath.Join("migrations", name)
		content := "-- +goose Up\n" + m.SQL
		if os.Getenv("UPDATE_MIGRATIONS") != "" {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run UPDATE_MIGRATIONS=1 go test -run TestExportedMigrationsUpToDate)", path, err)
			continue
		}
		if string(got) != content {
			t.Errorf("%s differs from embedded migration %d (run UPDATE_MIGRATIONS=1 go test -run TestExportedMigrationsUpToDate)", path, m.Version)
		}
	}
	// No stray .sql file a tool would apply too.
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !want[filepath.Base(f)] {
			t.Errorf("%s is not an embedded migration: goose would apply it", f)
		}
	}
}

// TestExportedScriptApplies: the plain script applies on its own (as an
// external migration tool would) and yields a table the relay accepts.
func TestExportedScriptApplies(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("script")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	script, err := outbox.MigrationSQL(outbox.MigrateConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.Pool(t, "")
	if _, err := pool.Exec(ctx(t), script); err != nil {
		t.Fatalf("script: %v\n%s", err, script)
	}
	r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckSchema(ctx(t)); err != nil {
		t.Fatalf("relay rejects a table made by the exported script: %v", err)
	}
}

// TestHostileIdentifiers: configured names are quoted everywhere, so a name
// built to inject SQL is just an odd table name.
func TestHostileIdentifiers(t *testing.T) {
	t.Parallel()
	schema := `s"; DROP TABLE victim;--`
	table := `x"; DROP TABLE victim;--`
	pool := testdb.Pool(t, "")
	victimSchema := testdb.Schema(t)
	victim := pgx.Identifier{victimSchema, "victim"}.Sanitize()
	if _, err := pool.Exec(ctx(t), "CREATE TABLE "+victim+" (id int)"); err != nil {
		t.Fatal(err)
	}
	// The hostile schema name is unique per run through the victim schema's suffix.
	schema += victimSchema
	t.Cleanup(func() { testdb.Drop(t, schema) })

	cfg := outbox.MigrateConfig{Schema: schema, Table: table}
	if _, err := outbox.Migrate(ctx(t), pool, cfg); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx(t), tx, event("1", 1))
		return err
	})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, Table: table, Retention: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.ProcessBatch(ctx(t)); err != nil || res.Published != 1 {
		t.Fatalf("batch = %+v, %v", res, err)
	}
	a, err := admin.New(pool, admin.Config{Schema: schema, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Status(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Cleanup(ctx(t), 0, 10, nil); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := pool.QueryRow(ctx(t), "SELECT to_regclass($1) IS NOT NULL", victim).Scan(&exists); err != nil || !exists {
		t.Fatalf("victim table gone (exists=%v, err=%v): an identifier was spliced unquoted", exists, err)
	}
	var n int
	q := "SELECT count(*) FROM " + pgx.Identifier{schema, table}.Sanitize()
	if err := pool.QueryRow(ctx(t), q).Scan(&n); err != nil || n != 0 {
		t.Fatalf("hostile-named table: %d rows, %v; want it to exist and be cleaned", n, err)
	}
	for _, bad := range []string{"", strings.Repeat("a", 64), "nul\x00byte"} {
		if _, err := outbox.NewWriter(outbox.WriterConfig{Table: bad}); err == nil && bad != "" {
			t.Errorf("table %q accepted", bad)
		}
		if _, err := outbox.NewWriter(outbox.WriterConfig{Schema: bad}); err == nil && bad != "" {
			t.Errorf("schema %q accepted", bad)
		}
	}
}

// TestClaimUsesReadyIndex shows with EXPLAIN that the claim reads the
// partial ready index and never processed or scheduled rows, however many
// are retained, and that the pending index it replaced (migration 8) is gone.
func TestClaimUsesReadyIndex(t *testing.T) {
	e := setup(t)
	_, err := e.pool.Exec(ctx(t), `
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, processed_at)
SELECT 'order', g::text, 'order.created', '{}', now() FROM generate_series(1, 50000) g;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_at)
SELECT 'order', g::text, 'order.created', '{}', now() + interval '1 day' FROM generate_series(1, 5000) g;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(1, 100) g;
ANALYZE outbox_events;`)
	if err != nil {
		t.Fatal(err)
	}
	var pending *string
	if err := e.pool.QueryRow(ctx(t), `SELECT to_regclass('outbox_events_pending_idx')::text`).Scan(&pending); err != nil || pending != nil {
		t.Fatalf("pending index = %v, %v; want it dropped by migration 8", pending, err)
	}
	tx, err := e.pool.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx(t))
	// The relay's claim (internal/store), without its column list.
	rows, err := tx.Query(ctx(t), `EXPLAIN (ANALYZE, FORMAT TEXT)
SELECT id FROM outbox_events
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now())
  AND seq > 0
ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	full := strings.Join(lines, "\n")
	if !strings.Contains(full, "outbox_events_ready_idx") || strings.Contains(full, "Seq Scan") {
		t.Errorf("claim does not read the ready index:\n%s", full)
	}
	t.Logf("claim plan with 50k processed and 5k scheduled rows retained:\n%s", full)
}

// TestRelayBeforeMigration8: migration 8 only drops an index no statement
// needs, so a table migrated up to 7 (a relay upgraded before its table) is
// relayed as it is, and then migrated under the running relay.
func TestRelayBeforeMigration8(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	ms, err := outbox.Migrations(outbox.MigrateConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version >= 8 {
			break
		}
		if _, err := pool.Exec(ctx(t), m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	write := func(n int) {
		t.Helper()
		for i := range n {
			err := pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
				_, err := w.Write(ctx(t), tx, event(fmt.Sprint("o-", i), i))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	write(5)
	if err := pub.WaitDistinct(ctx(t), 5); err != nil {
		t.Fatalf("relay on a table without migration 8: %v", err)
	}
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	write(5)
	if err := pub.WaitDistinct(ctx(t), 10); err != nil {
		t.Fatalf("relay after migration 8 under it: %v", err)
	}
}

// TestMigrationSQLRejectsControlCharacters: a name with a newline once broke
// out of a comment line of the printed script, so applying the script ran
// the SQL after the newline. Such names are refused with the field named, and
// a canary table survives whatever script was printed.
func TestMigrationSQLRejectsControlCharacters(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := pool.Exec(ctx(t), "CREATE TABLE canary (id int)"); err != nil {
		t.Fatal(err)
	}
	hostile := "ev\nDROP TABLE canary; --"
	for _, cfg := range []outbox.MigrateConfig{{Table: hostile}, {Schema: hostile}} {
		script, err := outbox.MigrationSQL(cfg)
		if err == nil {
			// Show what the old behaviour did with it.
			if _, err := pool.Exec(ctx(t), script); err != nil {
				t.Logf("script failed: %v", err)
			}
			var exists bool
			_ = pool.QueryRow(ctx(t), "SELECT to_regclass('canary') IS NOT NULL").Scan(&exists)
			t.Errorf("MigrationSQL(%+v) accepted the name; applying its script left the canary table existing=%v", cfg, exists)
			continue
		}
		want := "MigrateConfig.Table"
		if cfg.Schema != "" {
			want = "MigrateConfig.Schema"
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "control character") {
			t.Errorf("MigrationSQL(%+v) error = %q, want it to name %s and the control character", cfg, err, want)
		}
		if _, err := outbox.Migrate(ctx(t), pool, cfg); err == nil {
			t.Errorf("Migrate(%+v) accepted the name", cfg)
		}
	}
}

// TestMigrationSQLOddNames: a legal name full of quotes, spaces and non-ASCII
// letters survives the printed script as one quoted identifier: applying the
// script with PostgreSQL creates exactly the table, its view, indexes and
// identity sequence under those names, in that schema, and nothing else.
func TestMigrationSQLOddNames(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	schema := `Odd "sch" é ` + testdb.NewSchemaName("s")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	table := `Ordres "été"; x_events`
	script, err := outbox.MigrationSQL(outbox.MigrateConfig{Schema: schema, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") && strings.Contains(line, "été") {
			t.Errorf("a name is written into a comment line: %q", line)
		}
	}
	if _, err := pool.Exec(ctx(t), script); err != nil {
		t.Fatalf("script: %v\n%s", err, script)
	}
	got := relationsIn(t, pool, schema)
	want := []string{
		`Ordres "été"; x_cancels r`,
		`Ordres "été"; x_cancels_pkey i`,
		`Ordres "été"; x_dead_letters v`,
		`Ordres "été"; x_events r`,
		`Ordres "été"; x_events_aggregate_idx i`,
		`Ordres "été"; x_events_arch_id_idx i`,
		`Ordres "été"; x_events_arch_rep_idx i`,
		`Ordres "été"; x_events_archive r`,
		`Ordres "été"; x_events_archive_pkey i`,
		`Ordres "été"; x_events_dead_idx i`,
		`Ordres "été"; x_events_dlq_idx i`,
		`Ordres "été"; x_events_held_idx i`,
		`Ordres "été"; x_events_pkey i`,
		`Ordres "été"; x_events_processed_idx i`,
		`Ordres "été"; x_events_ready_idx i`,
		`Ordres "été"; x_events_replay_idx i`,
		`Ordres "été"; x_events_retry_idx i`,
		`Ordres "été"; x_events_sched_idx i`,
		`Ordres "été"; x_events_seq_seq S`,
		`Ordres "été"; x_replays r`,
		`Ordres "été"; x_replays_pkey i`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects in %q:\n%s\nwant:\n%s", schema, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Schema: schema, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckSchema(ctx(t)); err != nil {
		t.Errorf("relay rejects the table the script made: %v", err)
	}
}

// relationsIn lists "name relkind" of every relation in schema, sorted.
func relationsIn(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string) []string {
	t.Helper()
	rows, err := pool.Query(ctx(t), `SELECT c.relname || ' ' || c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMigrateRefusesForeignTable: a table of the outbox's name that is
// something else is refused before anything changes, by Migrate, the relay
// and Admin alike, naming what it lacks; the reference design's own table
// is still adopted.
func TestMigrateRefusesForeignTable(t *testing.T) {
	t.Parallel()
	type bare struct {
		schema string
		pool   *pgxpool.Pool
	}
	setupEmpty := func(t *testing.T) bare { // a schema with nothing migrated
		schema := testdb.Schema(t)
		return bare{schema, testdb.Pool(t, schema)}
	}
	e := setupEmpty(t)
	if _, err := e.pool.Exec(ctx(t), `CREATE TABLE outbox_events (id serial PRIMARY KEY, name text)`); err != nil {
		t.Fatal(err)
	}
	_, err := outbox.Migrate(ctx(t), e.pool, outbox.MigrateConfig{Schema: e.schema})
	if !errors.Is(err, outbox.ErrNotOutboxTable) || !strings.Contains(err.Error(), "aggregate_type") || !strings.Contains(err.Error(), "another table name") {
		t.Fatalf("Migrate on a foreign table: %v, want ErrNotOutboxTable naming a missing column and the fix", err)
	}
	var cols int
	if err := e.pool.QueryRow(ctx(t), `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outbox_events'`, e.schema).Scan(&cols); err != nil || cols != 2 {
		t.Errorf("the foreign table has %d columns after the refusal (%v), want its 2", cols, err)
	}
	r, err := outbox.NewRelay(e.pool, memory.New(), outbox.RelayConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx(t)); !errors.Is(err, outbox.ErrNotOutboxTable) {
		t.Errorf("Relay.Run on a foreign table: %v, want ErrNotOutboxTable", err)
	}
	a, err := admin.New(e.pool, admin.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Status(ctx(t)); !errors.Is(err, outbox.ErrNotOutboxTable) || errors.Is(err, outbox.ErrNotMigrated) {
		t.Errorf("Admin.Status on a foreign table: %v, want ErrNotOutboxTable, not ErrNotMigrated", err)
	}

	// The reference design's table, hand-made: adopted.
	ref := setupEmpty(t)
	if _, err := ref.pool.Exec(ctx(t), `CREATE TABLE outbox_events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
		aggregate_type varchar(100) NOT NULL, aggregate_id varchar(100) NOT NULL, event_type varchar(100) NOT NULL,
		payload jsonb NOT NULL, attempts int NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(), processed_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Migrate(ctx(t), ref.pool, outbox.MigrateConfig{Schema: ref.schema}); err != nil {
		t.Fatalf("Migrate on the reference design's table: %v", err)
	}
}
