// Package migrate holds pgoutbox's versioned, embedded migrations and applies
// them under an advisory lock.
package migrate

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/dbtx"
	"github.com/pgoutbox/outbox/internal/ident"
)

//go:embed sql/*.sql
var files embed.FS

// lockKey serializes every pgoutbox migration in a database: two processes
// migrating at once (say, two replicas starting together) take turns, and the
// second finds the work done.
const lockKey = "pgoutbox.migrate"

// Migration is one numbered step, rendered for a given table.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns every migration rendered for n, in version order.
func All(n ident.Names) ([]Migration, error) { return AllFor(n, false) }

// Data is what the outbox table's migrations are rendered with.
type Data struct {
	ident.Names
	// Partitioned: the table is (or is to be created) partitioned by seq,
	// for the WAL source's partition rotation (see docs/WAL.md).
	Partitioned bool
}

// AllFor returns every migration rendered for n, for a partitioned table
// when partitioned is set.
func AllFor(n ident.Names, partitioned bool) ([]Migration, error) {
	if partitioned {
		if err := n.CheckPartitionable(); err != nil {
			return nil, err
		}
	}
	return Render(files, "sql", Data{Names: n, Partitioned: partitioned})
}

// Render reads the numbered templates NNN_description.sql in dir of fsys and
// renders each with data, in version order. The inbox's migrations use it too.
func Render(fsys fs.FS, dir string, data any) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNN_description.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		raw, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(name).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: buf.String()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Latest is the highest migration version.
func Latest() int {
	ms, err := All(ident.Names{})
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Script renders every migration as one plain SQL script, for teams that
// apply migrations with their own tool. It creates the schema if one is set
// and does not touch pgoutbox's own bookkeeping table.
func Script(n ident.Names) (string, error) { return ScriptFor(n, false) }

// ScriptFor is Script for a partitioned table when partitioned is set.
func ScriptFor(n ident.Names, partitioned bool) (string, error) {
	ms, err := AllFor(n, partitioned)
	if err != nil {
		return "", err
	}
	return ScriptOf("pgoutbox migrations", n.QSchema, ms), nil
}

// ScriptOf joins ms into one script under a title comment, creating qSchema
// first when it is not empty. No configured name goes into a comment: a
// comment ends at a newline, and the names appear only as quoted
// identifiers in statements.
func ScriptOf(title, qSchema string, ms []Migration) string {
	var b strings.Builder
	b.WriteString("-- " + title + "\n")
	if qSchema != "" {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", qSchema)
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "\n-- +migrate %03d_%s\n%s", m.Version, m.Name, m.SQL)
	}
	return b.String()
}

// Applied describes one migration's state in a database.
type Applied struct {
	Migration
	AppliedAt *time.Time // nil when pending
}

// Target is one set of migrations applied and recorded together: the outbox
// table's, or an inbox table's.
type Target struct {
	// Key identifies the set in the bookkeeping table; always a bind
	// parameter.
	Key string
	// Schema is the raw schema name ("" means the search_path) and QSchema
	// the same quoted; Run creates the schema when it is missing.
	Schema, QSchema string
	// QMigrations is the quoted bookkeeping table, in the same schema.
	QMigrations string
	// Label names the migrated table in errors (quoted).
	Label string
}

// OutboxTarget is the outbox table's target.
func OutboxTarget(n ident.Names) Target {
	return Target{Key: n.Target, Schema: n.Schema, QSchema: n.QSchema, QMigrations: n.QMigrations, Label: n.QTable}
}

func ensureBookkeeping(ctx context.Context, tx dbtx.Querier, t Target) error {
	if t.QSchema != "" {
		// Not CREATE SCHEMA IF NOT EXISTS: that needs the CREATE privilege
		// on the database even when the schema exists.
		rows, err := tx.Query(ctx, `SELECT 1 FROM pg_namespace WHERE nspname = $1`, t.Schema)
		if err != nil {
			return fmt.Errorf("check schema: %w", err)
		}
		exists := rows.Next()
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("check schema: %w", err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+t.QSchema); err != nil {
				return fmt.Errorf("create schema %s: %w", t.QSchema, err)
			}
		}
	}
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.QMigrations+` (
    target     TEXT        NOT NULL,
    version    INT         NOT NULL,
    name       TEXT        NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (target, version)
)`)
	if err != nil {
		return fmt.Errorf("create %s: %w", t.QMigrations, err)
	}
	return nil
}

// Up applies the outbox table's pending migrations; see Run. With
// partitioned set, a table that does not exist yet is created partitioned
// (see Data); a table that exists keeps its shape, and an unpartitioned one
// is an error (ErrNotPartitioned).
func Up(ctx context.Context, pool *pgxpool.Pool, n ident.Names, partitioned bool) ([]Migration, error) {
	kind, err := TableKind(ctx, dbtx.Pgx(pool), n)
	if err != nil {
		return nil, err
	}
	switch {
	case kind == KindPartitioned:
		partitioned = true
	case partitioned && kind == KindTable:
		return nil, fmt.Errorf("migrate: %w: %s exists and is not partitioned; a partitioned outbox is created as a new table (see docs/WAL.md, \"A partitioned table\")", ErrNotPartitioned, n.QTable)
	}
	ms, err := AllFor(n, partitioned)
	if err != nil {
		return nil, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	return Run(ctx, dbtx.PgxTx(tx), OutboxTarget(n), ms)
}

// ErrNotPartitioned means a partitioned table was asked for and the table
// exists unpartitioned.
var ErrNotPartitioned = errors.New("the outbox table is not partitioned")

// Table kinds, as TableKind reports them.
const (
	KindMissing     = ""
	KindTable       = "r"
	KindPartitioned = "p"
)

// TableKind reads the outbox table's relkind: KindMissing when it does not
// exist.
func TableKind(ctx context.Context, q dbtx.Querier, n ident.Names) (string, error) {
	rows, err := q.Query(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, n.QTable)
	if err != nil {
		return "", fmt.Errorf("migrate: read the table's kind: %w", err)
	}
	defer rows.Close()
	kind := KindMissing
	if rows.Next() {
		if err := rows.Scan(&kind); err != nil {
			return "", fmt.Errorf("migrate: read the table's kind: %w", err)
		}
	}
	return kind, rows.Err()
}

// Run applies the migrations of ms not yet recorded for t, in tx, under an
// advisory lock every pgoutbox migration of the database shares, records
// them, and commits. It returns the migrations it applied (none when already
// up to date). Run owns tx: it commits or rolls it back.
func Run(ctx context.Context, tx dbtx.Tx, t Target, ms []Migration) ([]Migration, error) {
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, lockKey); err != nil {
		return nil, fmt.Errorf("migrate: advisory lock: %w", err)
	}
	if err := ensureBookkeeping(ctx, tx, t); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	done, err := appliedVersions(ctx, tx, t)
	if err != nil {
		return nil, err
	}
	var applied []Migration
	for _, m := range ms {
		if _, ok := done[m.Version]; ok {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migrate: %03d_%s on %s: %w", m.Version, m.Name, t.Label, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+t.QMigrations+` (target, version, name) VALUES ($1, $2, $3)`, t.Key, m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("migrate: record %03d: %w", m.Version, err)
		}
		applied = append(applied, m)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return applied, nil
}

func appliedVersions(ctx context.Context, q dbtx.Querier, t Target) (map[int]time.Time, error) {
	rows, err := q.Query(ctx, `SELECT version, applied_at FROM `+t.QMigrations+` WHERE target = $1`, t.Key)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	defer rows.Close()
	out := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, fmt.Errorf("migrate: read applied versions: %w", err)
		}
		out[v] = at
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	return out, nil
}

// Status lists every migration with when it was applied. A database that was
// never migrated by pgoutbox reports every migration as pending.
func Status(ctx context.Context, pool *pgxpool.Pool, n ident.Names) ([]Applied, error) {
	kind, err := TableKind(ctx, dbtx.Pgx(pool), n)
	if err != nil {
		return nil, err
	}
	ms, err := AllFor(n, kind == KindPartitioned)
	if err != nil {
		return nil, err
	}
	t := OutboxTarget(n)
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.QMigrations).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	done := map[int]time.Time{}
	if exists {
		if done, err = appliedVersions(ctx, dbtx.Pgx(pool), t); err != nil {
			return nil, err
		}
	}
	out := make([]Applied, len(ms))
	for i, m := range ms {
		out[i].Migration = m
		if at, ok := done[m.Version]; ok {
			out[i].AppliedAt = &at
		}
	}
	return out, nil
}
