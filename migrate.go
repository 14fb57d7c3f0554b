package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/migrate"
)

// MigrateConfig names the outbox table to migrate, as in WriterConfig.
type MigrateConfig struct {
	Schema string
	Table  string
}

// MigrationInfo describes one versioned migration.
type MigrationInfo struct {
	Version   int
	Name      string
	SQL       string
	AppliedAt *time.Time // nil when not applied (MigrationStatus only)
}

// Migrate applies pgoutbox's pending migrations to the outbox table in one
// transaction, under an advisory lock: several processes may call it at once
// (the first does the work, the others find it done), and calling it again is
// a no-op. It creates the schema if one is configured and missing. It returns
// the migrations it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) ([]MigrationInfo, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, configErr("MigrateConfig", err)
	}
	ms, err := migrate.Up(ctx, pool, n)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	out := make([]MigrationInfo, len(ms))
	for i, m := range ms {
		out[i] = MigrationInfo{Version: m.Version, Name: m.Name, SQL: m.SQL}
	}
	return out, nil
}

// MigrationStatus lists every migration and when it was applied to the table.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) ([]MigrationInfo, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, configErr("MigrateConfig", err)
	}
	st, err := migrate.Status(ctx, pool, n)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	out := make([]MigrationInfo, len(st))
	for i, a := range st {
		out[i] = MigrationInfo{Version: a.Version, Name: a.Name, SQL: a.SQL, AppliedAt: a.AppliedAt}
	}
	return out, nil
}

// MigrationSQL returns every migration as one plain SQL script for the
// configured table, for teams that apply migrations with goose,
// golang-migrate, atlas or by hand. The files under migrations/ in the
// repository are these migrations for the default table, one file per
// version, in the form goose and golang-migrate both read
// (NNN_name.up.sql starting with "-- +goose Up").
func MigrationSQL(cfg MigrateConfig) (string, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return "", configErr("MigrateConfig", err)
	}
	return migrate.Script(n)
}

// Migrations returns each migration rendered for the configured table.
func Migrations(cfg MigrateConfig) ([]MigrationInfo, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, configErr("MigrateConfig", err)
	}
	ms, err := migrate.All(n)
	if err != nil {
		return nil, err
	}
	out := make([]MigrationInfo, len(ms))
	for i, m := range ms {
		out[i] = MigrationInfo{Version: m.Version, Name: m.Name, SQL: m.SQL}
	}
	return out, nil
}
