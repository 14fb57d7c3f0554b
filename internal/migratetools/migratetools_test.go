// Package migratetools checks that the SQL files in migrations/ work with the
// migration tools the README names, through the tools' own Go libraries
// against the real PostgreSQL. It is a module of its own so that goose's and
// golang-migrate's dependency graphs (every database driver each supports)
// stay out of the outbox module that applications import.
package migratetools

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// dir is the repository's migrations/ folder, as a team would vendor it.
var dir = os.DirFS("../../migrations")

func dbURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// schema creates an empty schema, dropped when the test ends, and returns it
// with a database/sql handle whose search_path is that schema, so both the
// tool's own version table and the outbox table land in it.
func schema(t *testing.T, prefix string) (string, *sql.DB) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	admin, err := sql.Open("pgx", dbURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	q := pgx.Identifier{name}.Sanitize()
	if _, err := admin.ExecContext(ctx(t), "CREATE SCHEMA "+q); err != nil {
		t.Fatalf("PostgreSQL at %s: %v", dbURL(), err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+q+" CASCADE") })
	db, err := sql.Open("pgx", dbURL()+"&search_path="+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return name, db
}

// shape lists every relation of the schema with its columns and indexes'
// definitions, schema name removed, leaving out the tools' version tables.
func shape(t *testing.T, db *sql.DB, schema string) string {
	t.Helper()
	rows, err := db.QueryContext(ctx(t), `
SELECT c.relname || ' ' || c.relkind::text || coalesce(' ' || (
         SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY a.attnum)
         FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
       || coalesce(' ' || pg_get_indexdef(c.oid), '')
       || coalesce(' ' || array_to_string(c.reloptions, ','), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname NOT IN ('goose_db_version', 'goose_db_version_id_seq', 'goose_db_version_pkey', 'schema_migrations', 'schema_migrations_pkey', 'pgoutbox_migrations', 'pgoutbox_migrations_pkey')
ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.ReplaceAll(s, schema+".", ""))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// reference is the shape outbox.Migrate gives.
func reference(t *testing.T) string {
	t.Helper()
	name, db := schema(t, "ref")
	pool, err := pgxpool.New(ctx(t), dbURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: name}); err != nil {
		t.Fatal(err)
	}
	return shape(t, db, name)
}

// checkRelay fails t unless the relay accepts the table and publishes an
// event written to it.
func checkRelay(t *testing.T, schema string) {
	t.Helper()
	pool, err := pgxpool.New(ctx(t), dbURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx(t), tx, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: []byte(`{}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckSchema(ctx(t)); err != nil {
		t.Fatalf("relay refuses the table the tool made: %v", err)
	}
	if res, err := r.ProcessBatch(ctx(t)); err != nil || res.Published != 1 {
		t.Fatalf("relay batch = %+v, %v; want the event published", res, err)
	}
}

func TestGoose(t *testing.T) {
	t.Parallel()
	want := reference(t)
	name, db := schema(t, "goose")
	p, err := goose.NewProvider(goose.DialectPostgres, db, dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Up(ctx(t))
	if err != nil {
		t.Fatalf("goose up: %v", err)
	}
	ms, err := outbox.Migrations(outbox.MigrateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(ms) {
		t.Errorf("goose applied %d migrations, want %d", len(res), len(ms))
	}
	v, err := p.GetDBVersion(ctx(t))
	if err != nil || v != int64(ms[len(ms)-1].Version) {
		t.Errorf("goose version = %d, %v; want %d", v, err, ms[len(ms)-1].Version)
	}
	if res, err := p.Up(ctx(t)); err != nil || len(res) != 0 {
		t.Errorf("second goose up = %d applied, %v; want nothing to do", len(res), err)
	}
	if got := shape(t, db, name); got != want {
		t.Errorf("goose made:\n%s\noutbox.Migrate makes:\n%s", got, want)
	}
	checkRelay(t, name)
}

func TestGolangMigrate(t *testing.T) {
	t.Parallel()
	want := reference(t)
	name, db := schema(t, "gomigrate")
	src, err := iofs.New(dir, ".")
	if err != nil {
		t.Fatal(err)
	}
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatalf("golang-migrate up: %v", err)
	}
	ms, err := outbox.Migrations(outbox.MigrateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	v, dirty, err := m.Version()
	if err != nil || dirty || v != uint(ms[len(ms)-1].Version) {
		t.Errorf("golang-migrate version = %d (dirty %v), %v; want %d", v, dirty, err, ms[len(ms)-1].Version)
	}
	if err := m.Up(); err != migrate.ErrNoChange {
		t.Errorf("second golang-migrate up = %v, want ErrNoChange", err)
	}
	if got := shape(t, db, name); got != want {
		t.Errorf("golang-migrate made:\n%s\noutbox.Migrate makes:\n%s", got, want)
	}
	checkRelay(t, name)
}
