package outboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/wal"
)

// migrateFlags are migrate's flags.
type migrateFlags struct {
	d        dbOptions
	print    bool
	asJS     bool
	exitCode bool
	source   string
	parted   bool
	schemas  string
}

func migrateCommand() (*options, func(context.Context, *cli, *options) error) {
	var f migrateFlags
	o := newOptions("migrate", "[up | status | sql | drop-wal] [flags]", `
Applies pgoutbox's pending migrations to the outbox table (creating the
schema if --schema names one that does not exist), in one transaction under an
advisory lock: replicas may run it at once, and running it again is a no-op.

  outbox migrate [up]     apply pending migrations
  outbox migrate status   list migrations and when each was applied (--json);
                          with --exit-code it exits 4 when one is pending
  outbox migrate sql      print every migration as one SQL script for the
                          configured schema and table, for teams that apply
                          migrations with their own tool; needs no database
                          (same as outbox migrate --print)
  outbox migrate drop-wal remove the WAL source's replication slot and
                          publication and set the table up for the table
                          source again (unconfirmed events are still in the
                          table); refused, exit 2, while a relay streams the
                          slot: stop the WAL relays first

With --source wal, migrate (up) also checks the logical replication
prerequisites, exiting 2 with one line naming a missing setting (wal_level,
REPLICATION, free slots), then sets the table up for the WAL source: its
publication and slot, and without the two indexes only a table source reads
(each event then costs its writer two index entries fewer; a table source
refuses the table until drop-wal). migrate sql also prints that SQL, for
DBAs who run it by hand.

With --source wal --partitioned, a table that does not exist yet is created
partitioned by seq ranges: the relay streaming its slot then drops delivered
events a partition at a time (--rotate-events, --rotate-interval on outbox
relay), so the table stays small with no vacuum. An existing unpartitioned
table is refused (exit 2), never converted.

With --schemas 'tenant_*' (names or patterns, comma-separated; * is any
run of characters, ? one), migrate and migrate status run on the outbox
table of every schema of the database that matches: a schema per tenant.
Each schema is migrated as a single migrate would be, in its own
transaction under its own lock; one that fails is reported and the others
go on (exit 1 if any failed). The table source only, for now.`)
	f.register(o)
	o.subs = []string{"up", "status", "sql", "drop-wal"}
	return o, func(ctx context.Context, c *cli, o *options) error { return c.migrate(ctx, o, &f) }
}

func (f *migrateFlags) register(o *options) {
	f.d.register(o)
	o.fs.BoolVar(&f.print, "print", false, "print the SQL instead of applying it (same as migrate sql)")
	o.fs.BoolVar(&f.asJS, "json", false, "migrate and migrate status: print JSON")
	o.fs.BoolVar(&f.exitCode, "exit-code", false, "migrate status: exit 4 when a migration is pending (for scripts and init containers)")
	// A setting, as on outbox relay: one OUTBOX_SOURCE or config file
	// serves both commands.
	o.fs.StringVar(&f.source, "source", "table", "the relay's event source: table, or wal to create (migrate) or print (migrate sql) the publication and replication slot too")
	o.fs.BoolVar(&f.parted, "partitioned", false, "with --source wal: create the outbox table partitioned, so the relay drops delivered events a partition at a time (a new table only)")
	o.fs.StringVar(&f.schemas, "schemas", "", "migrate and migrate status: every schema whose name matches one of these comma-separated names or patterns (tenant_*; * any run of characters, ? one), instead of --schema")
	o.flagOnly("print", "json", "exit-code", "partitioned", "schemas")
}

// migrate checks the flags and runs the subcommand: sql (no database),
// status, drop-wal, or up.
func (c *cli) migrate(ctx context.Context, o *options, f *migrateFlags) error {
	if len(o.args) > 0 {
		return usageErr("migrate: unexpected argument %q (want up, status, sql or drop-wal)", o.args[0])
	}
	if f.source != "table" && f.source != "wal" {
		return o.settingErr("source", "%q is not a source (want table or wal)", f.source)
	}
	if f.parted && f.source != "wal" {
		return usageErr("migrate: --partitioned needs --source wal: only the WAL source's relay rotates the partitions")
	}
	if f.schemas != "" {
		return c.migrateSchemas(ctx, o, f)
	}
	mc := outbox.MigrateConfig{Schema: f.d.Schema, Table: f.d.Table, Partitioned: f.parted}
	if f.print || o.sub == "sql" {
		return migrateSQL(c, mc, f.source == "wal")
	}
	pool, err := c.openDB(ctx, o, &f.d)
	if err != nil {
		return err
	}
	defer pool.Close()
	adm, err := admin.New(pool, admin.Config{Schema: f.d.Schema, Table: f.d.Table})
	if err != nil {
		return flagError(err)
	}
	table := adm.Table()
	switch o.sub {
	case "status":
		return migrateStatus(ctx, c, pool, mc, table, f.asJS, f.exitCode)
	case "drop-wal":
		return migrateDropWAL(ctx, c, pool, mc)
	}
	return migrateUp(ctx, c, pool, mc, table, f.source == "wal", f.asJS)
}

// migrateUp applies the pending migrations and, for the WAL source, sets
// the table up for it once its prerequisites are checked.
func migrateUp(ctx context.Context, c *cli, pool *pgxpool.Pool, mc outbox.MigrateConfig, table string, withWAL, asJSON bool) error {
	if withWAL {
		// Before migrating: a missing prerequisite changes nothing.
		if err := outbox.CheckReplication(ctx, pool, mc); err != nil {
			return replicationErr(err)
		}
	}
	applied, err := outbox.Migrate(ctx, pool, mc)
	if errors.Is(err, outbox.ErrNotPartitioned) {
		return &exitError{code: ExitUsage, err: err}
	}
	if err != nil {
		return migrateDenied(pool, err)
	}
	var repl *outbox.ReplicationInfo
	if withWAL {
		info, err := outbox.SetupReplication(ctx, pool, mc)
		if err != nil {
			return replicationErr(migrateDenied(pool, err))
		}
		repl = &info
	}
	all, err := outbox.Migrations(mc)
	if err != nil {
		return err
	}
	version := all[len(all)-1].Version
	if asJSON {
		out := make([]appliedJSON, len(applied))
		for i, m := range applied {
			out[i] = appliedJSON{Version: m.Version, Name: m.Name}
		}
		js := map[string]any{"table": table, "applied": out, "version": version}
		if repl != nil {
			js["publication"], js["slot"], js["slot_created"] = repl.Publication, repl.Slot, repl.Created
		}
		return writeJSON(c, js)
	}
	for _, m := range applied {
		fmt.Fprintf(c.stdout, "applied %03d_%s to %s\n", m.Version, m.Name, table)
	}
	if len(applied) == 0 {
		fmt.Fprintf(c.stdout, "%s is up to date (version %d)\n", table, version)
	} else {
		fmt.Fprintf(c.stdout, "%s is at version %d\n", table, version)
	}
	if repl != nil {
		verb := "exists"
		if repl.Created {
			verb = "created"
		}
		fmt.Fprintf(c.stdout, "WAL source: publication %s and replication slot %s (%s)\n", repl.Publication, repl.Slot, verb)
	}
	return nil
}

// migrateDenied rewords insufficient_privilege for migrate, which only
// the owner of the outbox's objects may run: exit 2, naming the fix.
func migrateDenied(pool *pgxpool.Pool, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return err
	}
	cc := pool.Config().ConnConfig
	role := pgx.Identifier{cc.User}.Sanitize()
	if strings.HasPrefix(pgErr.Message, "permission denied for database") {
		return &exitError{code: ExitUsage, err: fmt.Errorf("%w: creating the WAL source's publication needs CREATE on the database: GRANT CREATE ON DATABASE %s TO %s (docs/OPERATING.md#the-wal-relay)",
			err, pgx.Identifier{cc.Database}.Sanitize(), role)}
	}
	return &exitError{code: ExitUsage, err: fmt.Errorf("%w: outbox migrate creates and alters the outbox's tables (and, with --source wal, its publication): run it as the role that owns them, which %s is not (docs/OPERATING.md#the-owner)",
		err, role)}
}

// replicationErr gives a missing logical replication prerequisite, or a
// missing privilege, the configuration error's exit code.
func replicationErr(err error) error {
	if errors.Is(err, outbox.ErrReplicationPrerequisite) || errors.Is(err, outbox.ErrPrivilege) {
		return &exitError{code: ExitUsage, err: err}
	}
	return err
}

// migrateSQL prints the migrations as one script and, for the WAL source,
// the publication and slot after them.
func migrateSQL(c *cli, mc outbox.MigrateConfig, withWAL bool) error {
	script, err := outbox.MigrationSQL(mc)
	if err != nil {
		return flagError(err)
	}
	fmt.Fprint(c.stdout, script)
	if withWAL {
		repl, err := outbox.ReplicationSQL(mc)
		if err != nil {
			return flagError(err)
		}
		fmt.Fprint(c.stdout, "\n"+repl)
	}
	return nil
}

// migrateDropWAL removes the WAL source's slot and publication.
func migrateDropWAL(ctx context.Context, c *cli, pool *pgxpool.Pool, mc outbox.MigrateConfig) error {
	if err := outbox.DropReplication(ctx, pool, mc); err != nil {
		if errors.Is(err, wal.ErrSlotBusy) { // a relay streams it: nothing was done
			return &exitError{code: ExitUsage, err: err}
		}
		return err
	}
	fmt.Fprintln(c.stdout, "WAL source: replication slot and publication dropped (if they existed); the table is set up for the table source")
	return nil
}

type migrationJSON struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	AppliedAt *time.Time `json:"applied_at"`
}

func migrateStatus(ctx context.Context, c *cli, pool *pgxpool.Pool, mc outbox.MigrateConfig, table string, asJSON, exitCode bool) error {
	st, err := outbox.MigrationStatus(ctx, pool, mc)
	if err != nil {
		return err
	}
	pendingErr := func(n int) error {
		if n == 0 || !exitCode {
			return nil
		}
		return &exitError{code: ExitNotMigrated, err: fmt.Errorf("%s: %d migration(s) pending: run outbox migrate", table, n)}
	}
	if asJSON {
		out := make([]migrationJSON, len(st))
		pending := 0
		for i, m := range st {
			out[i] = migrationJSON{Version: m.Version, Name: m.Name, AppliedAt: m.AppliedAt}
			if m.AppliedAt == nil {
				pending++
			}
		}
		if err := writeJSON(c, map[string]any{"table": table, "migrations": out, "pending": pending}); err != nil {
			return err
		}
		return pendingErr(pending)
	}
	fmt.Fprintf(c.stdout, "%s\n", table)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "VERSION\tNAME\tAPPLIED\n")
	pending := 0
	for _, m := range st {
		at := "pending"
		if m.AppliedAt != nil {
			at = m.AppliedAt.UTC().Format(time.RFC3339)
		} else {
			pending++
		}
		fmt.Fprintf(tw, "%03d\t%s\t%s\n", m.Version, m.Name, at)
	}
	tw.Flush()
	if pending > 0 {
		fmt.Fprintf(c.stdout, "%d pending: run outbox migrate\n", pending)
	}
	return pendingErr(pending)
}

func writeJSON(c *cli, v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
