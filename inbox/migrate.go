package inbox

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/dbtx"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/migrate"
	"github.com/pgoutbox/outbox/outboxtype"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// DefaultTable is the inbox table's default name.
const DefaultTable = "processed_events"

// MigrateConfig names the inbox table to migrate, as in Config.
type MigrateConfig struct {
	// Schema holding the table; created if missing. Empty: the search_path.
	Schema string
	// Table name. Defaults to DefaultTable ("processed_events").
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

// newNames validates the Schema and Table of config ("Config",
// "MigrateConfig") and derives the names, or returns the
// *outboxtype.ConfigError naming the field.
func newNames(config, schema, table string) (names, error) {
	bad := func(err error) error {
		var fe *ident.FieldError
		if errors.As(err, &fe) {
			return &outboxtype.ConfigError{Config: "inbox." + config, Field: fe.Field, Err: errors.New(fe.Reason)}
		}
		return err
	}
	table = cmp.Or(table, DefaultTable)
	if err := ident.Validate("Table", table); err != nil {
		return names{}, bad(err)
	}
	if schema != "" {
		if err := ident.Validate("Schema", schema); err != nil {
			return names{}, bad(err)
		}
	}
	idx := table + "_processed_at_idx"
	if len(idx) > ident.MaxLen {
		return names{}, &outboxtype.ConfigError{Config: "inbox." + config, Field: "Table",
			Err: fmt.Errorf("%q is too long: the derived index name %q exceeds %d bytes", table, idx, ident.MaxLen)}
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

func (n names) target() migrate.Target {
	return migrate.Target{Key: n.Target, Schema: n.Schema, QSchema: n.QSchema, QMigrations: n.QMigrations, Label: n.QTable}
}

func (cfg MigrateConfig) names() (names, error) {
	return newNames("MigrateConfig", cfg.Schema, cfg.Table)
}

func migrations(n names) ([]migrate.Migration, error) {
	ms, err := migrate.Render(migrationFiles, "migrations", n)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return ms, nil
}

func exported(ms []migrate.Migration) []Migration {
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration(m)
	}
	return out
}

// Migrations returns every migration rendered for the configured table.
func Migrations(cfg MigrateConfig) ([]Migration, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	ms, err := migrations(n)
	return exported(ms), err
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
	return migrate.ScriptOf("pgoutbox inbox migrations", n.QSchema, ms), nil
}

// Migrate applies the inbox's pending migrations to pool in one transaction,
// under the advisory lock every pgoutbox migration takes, and records them in
// pgoutbox_migrations (target "inbox:<schema>.<table>") in the table's
// schema, which it creates if missing. Concurrent callers take turns; calling
// it again is a no-op. It returns the migrations it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) ([]Migration, error) {
	return run(ctx, cfg, func(ctx context.Context) (dbtx.Tx, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return dbtx.PgxTx(tx), nil
	})
}

// MigrateDB is Migrate for a database/sql handle (pgx's stdlib, lib/pq).
func MigrateDB(ctx context.Context, db *sql.DB, cfg MigrateConfig) ([]Migration, error) {
	return run(ctx, cfg, func(ctx context.Context) (dbtx.Tx, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return dbtx.SQLTx(tx), nil
	})
}

func run(ctx context.Context, cfg MigrateConfig, begin func(context.Context) (dbtx.Tx, error)) ([]Migration, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	ms, err := migrations(n)
	if err != nil {
		return nil, err
	}
	tx, err := begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: migrate: begin: %w", err)
	}
	applied, err := migrate.Run(ctx, tx, n.target(), ms)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return exported(applied), nil
}
