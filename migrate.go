package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/migrate"
	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/internal/wal"
)

// MigrateConfig names the outbox table to migrate, as in WriterConfig.
type MigrateConfig struct {
	Schema string
	Table  string
	// Partitioned creates the table partitioned by seq ranges, for the WAL
	// source: its relay then drops delivered events a partition at a time,
	// so the table stays small without vacuum (docs/WAL.md, "A partitioned
	// table"). It applies only when the table does not exist yet:
	// migrating an existing unpartitioned table with it set is an error
	// matching ErrNotPartitioned. A table created partitioned stays so
	// whatever later migrations say. Default false.
	Partitioned bool
}

// ErrNotPartitioned is what errors.Is finds in Migrate's error when
// MigrateConfig.Partitioned is set and the table exists unpartitioned.
var ErrNotPartitioned = migrate.ErrNotPartitioned

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
		return nil, ident.ConfigErr("MigrateConfig", err)
	}
	if err := store.ForeignTable(ctx, pool, n); err != nil {
		return nil, err
	}
	ms, err := migrate.Up(ctx, pool, n, cfg.Partitioned)
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
		return nil, ident.ConfigErr("MigrateConfig", err)
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
		return "", ident.ConfigErr("MigrateConfig", err)
	}
	return migrate.ScriptFor(n, cfg.Partitioned)
}

// Migrations returns each migration rendered for the configured table.
func Migrations(cfg MigrateConfig) ([]MigrationInfo, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, ident.ConfigErr("MigrateConfig", err)
	}
	ms, err := migrate.AllFor(n, cfg.Partitioned)
	if err != nil {
		return nil, ident.ConfigErr("MigrateConfig", err)
	}
	out := make([]MigrationInfo, len(ms))
	for i, m := range ms {
		out[i] = MigrationInfo{Version: m.Version, Name: m.Name, SQL: m.SQL}
	}
	return out, nil
}

// ErrReplicationPrerequisite is what errors.Is finds in the error of
// SetupReplication (and, later, of a relay reading the WAL) when the server
// or the role cannot stream from a logical replication slot: wal_level is
// not logical, the role lacks REPLICATION, no slot or WAL sender is free.
// The error's text names the setting and its fix in one line.
var ErrReplicationPrerequisite = wal.ErrPrerequisite

// ReplicationSQL returns the SQL that creates the WAL source's publication
// and logical replication slot for the configured table, with the settings
// and grants it needs as comments, for DBAs who create them by hand. The
// names are derived from the table (see docs/WAL.md).
func ReplicationSQL(cfg MigrateConfig) (string, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return "", ident.ConfigErr("MigrateConfig", err)
	}
	return wal.NamesFor(n, "").Script(), nil
}

// CheckReplication checks that the server and the pool's role can stream
// the configured table's slot: wal_level is logical, the role has
// REPLICATION (or rds_replication, or is a superuser), a replication slot
// (unless the table's exists) and a WAL sender are free. A missing one is
// an error matching ErrReplicationPrerequisite, naming it and its fix.
func CheckReplication(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) error {
	in, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return ident.ConfigErr("MigrateConfig", err)
	}
	n, err := wal.Resolve(ctx, pool, in)
	if err == nil {
		err = wal.Check(ctx, pool, n)
	}
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// ReplicationInfo names the WAL source's publication and slot.
type ReplicationInfo struct {
	Publication string
	Slot        string
	// Created is true when SetupReplication created the slot (false: it
	// existed).
	Created bool
}

// SetupReplication sets the configured table up for the WAL source: it
// checks the prerequisites (an error matching ErrReplicationPrerequisite
// names the missing one), creates the publication and the slot unless they
// exist, then drops the two indexes only a table source reads (its claims
// on rows as written), which a WAL relay does without: each event then
// costs its writer two index entries fewer. A table source refuses the
// table until DropReplication sets it up for the table source again. The
// slot keeps WAL from now on until a relay confirms it: run it when a WAL
// relay will follow, and see docs/WAL.md for max_slot_wal_keep_size.
func SetupReplication(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) (ReplicationInfo, error) {
	in, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return ReplicationInfo{}, ident.ConfigErr("MigrateConfig", err)
	}
	n, err := wal.Resolve(ctx, pool, in)
	if err != nil {
		return ReplicationInfo{}, fmt.Errorf("outbox: %w", err)
	}
	info := ReplicationInfo{Publication: n.Publication, Slot: n.Slot}
	if err := directOnly(ctx, pool, "SetupReplication (outbox migrate --source wal)"); err != nil {
		return info, err
	}
	if err := wal.Check(ctx, pool, n); err != nil {
		return info, fmt.Errorf("outbox: %w", err)
	}
	err = wal.WithSetupLock(ctx, pool, n, func(db wal.DB) error {
		if info.Created, err = wal.Create(ctx, db, n); err != nil {
			return err
		}
		return wal.DropTableSourceIndexes(ctx, db, n)
	})
	if err != nil {
		return info, fmt.Errorf("outbox: %w", err)
	}
	return info, nil
}

// DropReplication removes the WAL source's slot and publication for the
// configured table and sets the table up for the table source again
// (recreating, without blocking writers, the indexes SetupReplication
// dropped). It refuses while a relay streams the slot, naming it (that
// relay would create them again): stop the WAL relays first. Events the
// slot had not confirmed are still in the table.
func DropReplication(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) error {
	in, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return ident.ConfigErr("MigrateConfig", err)
	}
	n, err := wal.Resolve(ctx, pool, in)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if err := directOnly(ctx, pool, "DropReplication (outbox migrate drop-wal)"); err != nil {
		return err
	}
	err = wal.WithSetupLock(ctx, pool, n, func(db wal.DB) error {
		if err := wal.Drop(ctx, db, n); err != nil {
			return err
		}
		return wal.CreateTableSourceIndexes(ctx, db, n)
	})
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}
