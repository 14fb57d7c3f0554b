package outboxcli

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

// schemaResult is what migrate --schemas did with one schema's outbox.
type schemaResult struct {
	Schema  string        `json:"schema"`
	Table   string        `json:"table"`
	Applied []appliedJSON `json:"applied,omitempty"` // migrate (up)
	Pending int           `json:"pending"`           // migrations left
	Version int           `json:"version"`           // the latest applied, 0 for none
	Error   string        `json:"error,omitempty"`
}

type appliedJSON struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

// migrateSchemas runs migrate (up) or migrate status on the outbox table
// of every schema --schemas matches, one after the other. Each is migrated
// as a single migrate would be: in its own transaction, under its own
// advisory lock, so that replicas may run it at once. A schema that fails
// does not stop the others.
func (c *cli) migrateSchemas(ctx context.Context, o *options, f *migrateFlags) error {
	switch {
	case f.d.Schema != "":
		return usageErr("migrate: --schemas and --schema%s both name the outbox's schema: give one", o.sourceOf("schema"))
	case f.print || o.sub == "sql":
		return usageErr("migrate sql prints the script of one schema (--schema); --schemas needs the database to list its schemas")
	case o.sub == "drop-wal":
		return usageErr("migrate drop-wal: one outbox at a time: give --schema, not --schemas")
	case f.source == "wal":
		return usageErr("migrate --schemas: the table source only for now; set the WAL source up one outbox at a time (--schema)")
	}
	likes, err := ident.SchemaPatterns("--schemas", f.schemas)
	if err != nil {
		return usageErr("migrate: %v", err)
	}
	if _, err := ident.New("x", f.d.Table); err != nil {
		return usageErr("migrate: --table: %v", err)
	}
	pool, err := c.openDB(ctx, o, &f.d)
	if err != nil {
		return err
	}
	defer pool.Close()
	schemas, err := store.Schemas(ctx, pool, likes)
	if err != nil {
		return fmt.Errorf("migrate --schemas: %w", err)
	}
	status := o.sub == "status"
	results := make([]schemaResult, 0, len(schemas))
	for _, s := range schemas {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mc := outbox.MigrateConfig{Schema: s, Table: f.d.Table}
		res := schemaResult{Schema: s, Table: pgx.Identifier{s, f.d.Table}.Sanitize()}
		if !status {
			applied, err := outbox.Migrate(ctx, pool, mc)
			if err != nil {
				res.Error = strings.TrimPrefix(migrateDenied(pool, err).Error(), "outbox: ")
				results = append(results, res)
				continue
			}
			for _, m := range applied {
				res.Applied = append(res.Applied, appliedJSON{Version: m.Version, Name: m.Name})
			}
		}
		if n, err := ident.New(s, f.d.Table); err == nil && status {
			// migrate would refuse it: say so in status too.
			if err := store.ForeignTable(ctx, pool, n); err != nil {
				res.Error = strings.TrimPrefix(err.Error(), "outbox: ")
				results = append(results, res)
				continue
			}
		}
		st, err := outbox.MigrationStatus(ctx, pool, mc)
		if err != nil {
			res.Error = strings.TrimPrefix(err.Error(), "outbox: ")
		}
		for _, m := range st {
			if m.AppliedAt == nil {
				res.Pending++
			} else {
				res.Version = max(res.Version, m.Version)
			}
		}
		results = append(results, res)
	}
	failed, pending := 0, 0
	for _, r := range results {
		if r.Error != "" {
			failed++
		} else if r.Pending > 0 {
			pending++
		}
	}
	if f.asJS {
		if err := writeJSON(c, map[string]any{"schemas": f.schemas, "outboxes": results, "failed": failed, "pending": pending}); err != nil {
			return err
		}
	} else {
		printSchemaResults(c, f.schemas, results, status, failed, pending)
	}
	switch {
	case failed > 0:
		return &exitError{code: ExitFailure, err: fmt.Errorf("migrate --schemas: %d of %d outboxes failed (named above)", failed, len(results))}
	case status && pending > 0 && f.exitCode:
		return &exitError{code: ExitNotMigrated, err: fmt.Errorf("migrate --schemas: %d of %d outboxes have migrations pending: run outbox migrate --schemas", pending, len(results))}
	}
	return nil
}

// printSchemaResults prints a line per outbox and a summary.
func printSchemaResults(c *cli, patterns string, results []schemaResult, status bool, failed, pending int) {
	if len(results) == 0 {
		fmt.Fprintf(c.stdout, "no schema matches %s\n", patterns)
		return
	}
	migrated := 0
	for _, r := range results {
		switch {
		case r.Error != "":
			fmt.Fprintf(c.stdout, "%s: failed: %s\n", r.Table, r.Error)
		case len(r.Applied) > 0:
			migrated++
			fmt.Fprintf(c.stdout, "%s: applied %d migration(s), now at version %d\n", r.Table, len(r.Applied), r.Version)
		case r.Pending > 0:
			fmt.Fprintf(c.stdout, "%s: %d pending (version %d)\n", r.Table, r.Pending, r.Version)
		default:
			fmt.Fprintf(c.stdout, "%s: up to date (version %d)\n", r.Table, r.Version)
		}
	}
	if status {
		fmt.Fprintf(c.stdout, "%d outbox(es): %d with migrations pending, %d failed\n", len(results), pending, failed)
		if pending > 0 {
			fmt.Fprintln(c.stdout, "run outbox migrate --schemas to apply them")
		}
		return
	}
	fmt.Fprintf(c.stdout, "%d outbox(es): %d migrated, %d up to date, %d failed\n", len(results), migrated, len(results)-migrated-failed, failed)
}
