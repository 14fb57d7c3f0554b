package inbox

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// DefaultTable is the reference article's table name.
const DefaultTable = "processed_events"

// migrateLockKey is the advisory lock every pgoutbox migration takes (the
// outbox's too), so migrations of one database never run concurrently.
const migrateLockKey = "pgoutbox.migrate"

// maxIdentLen is PostgreSQL's NAMEDATALEN-1.
const maxIdentLen = 63

// MigrateConfig names the inbox table to migrate, as in Config.
type MigrateConfig struct {
	// Schema holding the table; created if missing. Empty: the search_path.
	Schema string
	// Table name. Default "processed_events".
	Table string
}

// Migration is one numbered migration rendered for a table.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// names holds every quoted identifier of one inbox table. Only these, never a
// raw user string, are spliced into SQL.
type names struct {
	Schema, Table  string
	QSchema        string // "" when Schema is empty
	QTable         string
	QMigrations    string // pgoutbox's bookkeeping table, in the same schema
	ProcessedIndex string // unqualified: an index lives in its table's schema
	Target         string // the bookkeeping key; always a bind parameter
}

func newNames(field, schema, table string) (names, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ident.Validate(field+".Table", table); err != nil {
		return names{}, err
	}
	if schema != "" {
		if err := ident.Validate(field+".Schema", schema); err != nil {
			return names{}, err
		}
	}
	idx := table + "_processed_at_idx"
	if len(idx) > maxIdentLen {
		return names{}, fmt.Errorf("%s.Table: %q is too long: the derived index name %q exceeds %d bytes", field, table, idx, maxIdentLen)
	}
	q := func(n string) string {
		if schema == "" {
			return ident.Quote(n)
		}
		return ident.Quote(schema) + "." + ident.Quote(n)
	}
	n := names{
		Schema: schema, Table: table,
		QTable:         q(table),
		QMigrations:    q("pgoutbox_migrations"),
		ProcessedIndex: ident.Quote(idx),
		Target:         "inbox:" + table,
	}
	if schema != "" {
		n.QSchema = ident.Quote(schema)
		n.Target = "inbox:" + schema + "." + table
	}
	return n, nil
}

func (cfg MigrateConfig) names() (names, error) {
	n, err := newNames("MigrateConfig", cfg.Schema, cfg.Table)
	if err != nil {
		return names{}, fmt.Errorf("inbox: %w", err)
	}
	return n, nil
}

func migrations(n names) ([]Migration, error) {
	ms, err := migrate.Render(migrationFiles, "migrations", n)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration(m)
	}
	return out, nil
}

// Migrations returns every migration rendered for the configured table.
func Migrations(cfg MigrateConfig) ([]Migration, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return migrations(n)
}

// MigrationSQL returns the migrations as one plain SQL script for the
// configured table, for teams applying migrations with goose, golang-migrate,
// atlas or by hand. It creates the schema if one is set and leaves out
// pgoutbox's bookkeeping table. Every statement is idempotent.
func MigrationSQL(cfg MigrateConfig) (string, error) {
	n, err := cfg.names()
	if err != nil {
		return "", err
	}
	ms, err := migrations(n)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	// No configured name goes into a comment: a comment ends at a newline.
	b.WriteString("-- pgoutbox inbox migrations\n")
	if n.QSchema != "" {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", n.QSchema)
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "\n-- +migrate %03d_%s\n%s", m.Version, m.Name, m.SQL)
	}
	return b.String(), nil
}

// Migrate applies the inbox's pending migrations to pool in one transaction,
// under the advisory lock every pgoutbox migration takes, and records them in
// pgoutbox_migrations (target "inbox:<schema>.<table>") in the table's
// schema, which it creates if missing. Concurrent callers take turns; calling
// it again is a no-op. It returns the migrations it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) ([]Migration, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: migrate: begin: %w", err)
	}
	return runMigrations(ctx, pgxTx{tx}, n)
}

// MigrateDB is Migrate for a database/sql handle (pgx's stdlib, lib/pq).
func MigrateDB(ctx context.Context, db *sql.DB, cfg MigrateConfig) ([]Migration, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("inbox: migrate: begin: %w", err)
	}
	return runMigrations(ctx, sqlTx{tx}, n)
}

// runMigrations is the whole runner, written once against txn so both
// drivers share it. It owns tx: it commits or rolls it back.
func runMigrations(ctx context.Context, tx txn, n names) ([]Migration, error) {
	defer tx.rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	ms, err := migrations(n)
	if err != nil {
		return nil, err
	}
	if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, migrateLockKey); err != nil {
		return nil, fmt.Errorf("inbox: migrate: advisory lock: %w", err)
	}
	if n.QSchema != "" {
		// Not CREATE SCHEMA IF NOT EXISTS: that needs the CREATE privilege on
		// the database even when the schema exists.
		exists, err := tx.queryInts(ctx, `SELECT 1 FROM pg_namespace WHERE nspname = $1`, n.Schema)
		if err != nil {
			return nil, fmt.Errorf("inbox: migrate: check schema: %w", err)
		}
		if len(exists) == 0 {
			if _, err := tx.exec(ctx, `CREATE SCHEMA `+n.QSchema); err != nil {
				return nil, fmt.Errorf("inbox: migrate: create schema %s: %w", n.QSchema, err)
			}
		}
	}
	if _, err := tx.exec(ctx, `CREATE TABLE IF NOT EXISTS `+n.QMigrations+` (
    target     TEXT        NOT NULL,
    version    INT         NOT NULL,
    name       TEXT        NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (target, version)
)`); err != nil {
		return nil, fmt.Errorf("inbox: migrate: create %s: %w", n.QMigrations, err)
	}
	done, err := tx.queryInts(ctx, `SELECT version FROM `+n.QMigrations+` WHERE target = $1`, n.Target)
	if err != nil {
		return nil, fmt.Errorf("inbox: migrate: read applied versions: %w", err)
	}
	var applied []Migration
	for _, m := range ms {
		if contains(done, m.Version) {
			continue
		}
		if _, err := tx.exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("inbox: migrate: %03d_%s on %s: %w", m.Version, m.Name, n.QTable, err)
		}
		if _, err := tx.exec(ctx, `INSERT INTO `+n.QMigrations+` (target, version, name) VALUES ($1, $2, $3)`, n.Target, m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("inbox: migrate: record %03d: %w", m.Version, err)
		}
		applied = append(applied, m)
	}
	if err := tx.commit(ctx); err != nil {
		return nil, fmt.Errorf("inbox: migrate: commit: %w", err)
	}
	return applied, nil
}

func contains(vs []int, v int) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// txn is the little a transaction must do for the migration runner and for
// Handle, implemented for pgx and database/sql.
type txn interface {
	exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
	queryInts(ctx context.Context, sql string, args ...any) ([]int, error)
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) queryInts(ctx context.Context, q string, args ...any) ([]int, error) {
	rows, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

func (t pgxTx) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) queryInts(ctx context.Context, q string, args ...any) ([]int, error) {
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (t sqlTx) commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) rollback(context.Context) error { return t.tx.Rollback() }
