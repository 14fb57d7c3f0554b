// Package migrate holds pgoutbox's versioned, embedded migrations and applies
// them under an advisory lock.
package migrate

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
func All(n ident.Names) ([]Migration, error) { return Render(files, "sql", n) }

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
func Script(n ident.Names) (string, error) {
	ms, err := All(n)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	// No configured name goes into a comment: a comment ends at a newline,
	// and the names appear only as quoted identifiers in statements.
	b.WriteString("-- pgoutbox migrations\n")
	if n.QSchema != "" {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", n.QSchema)
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "\n-- +migrate %03d_%s\n%s", m.Version, m.Name, m.SQL)
	}
	return b.String(), nil
}

// Applied describes one migration's state in a database.
type Applied struct {
	Migration
	AppliedAt *time.Time // nil when pending
}

func ensureBookkeeping(ctx context.Context, tx pgx.Tx, n ident.Names) error {
	if n.Schema != "" {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, n.Schema).Scan(&exists); err != nil {
			return fmt.Errorf("check schema: %w", err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+n.QSchema); err != nil {
				return fmt.Errorf("create schema %s: %w", n.QSchema, err)
			}
		}
	}
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+n.QMigrations+` (
    target     TEXT        NOT NULL,
    version    INT         NOT NULL,
    name       TEXT        NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (target, version)
)`)
	if err != nil {
		return fmt.Errorf("create migrations table: %w", err)
	}
	return nil
}

// Up applies every pending migration in one transaction under an advisory
// lock and returns the versions it applied (none when already up to date).
func Up(ctx context.Context, pool *pgxpool.Pool, n ident.Names) ([]Migration, error) {
	ms, err := All(n)
	if err != nil {
		return nil, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, lockKey); err != nil {
		return nil, fmt.Errorf("migrate: advisory lock: %w", err)
	}
	if err := ensureBookkeeping(ctx, tx, n); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	done, err := appliedVersions(ctx, tx, n)
	if err != nil {
		return nil, err
	}
	var applied []Migration
	for _, m := range ms {
		if _, ok := done[m.Version]; ok {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migrate: %03d_%s on %s: %w", m.Version, m.Name, n.QTable, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+n.QMigrations+` (target, version, name) VALUES ($1, $2, $3)`, n.Target, m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("migrate: record %03d: %w", m.Version, err)
		}
		applied = append(applied, m)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return applied, nil
}

func appliedVersions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, n ident.Names) (map[int]time.Time, error) {
	rows, err := q.Query(ctx, `SELECT version, applied_at FROM `+n.QMigrations+` WHERE target = $1`, n.Target)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	out := map[int]time.Time{}
	var v int
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error { out[v] = at; return nil })
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	return out, nil
}

// Status lists every migration with when it was applied. A database that was
// never migrated by pgoutbox reports every migration as pending.
func Status(ctx context.Context, pool *pgxpool.Pool, n ident.Names) ([]Applied, error) {
	ms, err := All(n)
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, n.QMigrations).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	done := map[int]time.Time{}
	if exists {
		if done, err = appliedVersions(ctx, pool, n); err != nil {
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
