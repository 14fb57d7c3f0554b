package outboxcli

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/wal"
)

// migrate sql --source wal prints the migrations, then the publication and
// slot for the configured table; it needs no database.
func TestMigrateSQLSourceWAL(t *testing.T) {
	t.Parallel()
	noDB := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none"}
	r := run(t, noDB, "migrate", "sql", "--source", "wal", "--schema", "billing", "--table", "events")
	wantExit(t, r, ExitOK)
	mc := outbox.MigrateConfig{Schema: "billing", Table: "events"}
	script, err := outbox.MigrationSQL(mc)
	if err != nil {
		t.Fatal(err)
	}
	repl, err := outbox.ReplicationSQL(mc)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != script+"\n"+repl {
		t.Errorf("migrate sql --source wal is not the migrations then the replication SQL:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, `FOR TABLE "billing"."events" WITH (publish = 'insert'`) || !strings.Contains(r.stdout, "pg_create_logical_replication_slot(left('pgoutbox_' || regexp_replace(translate(current_database() || '_' || 'billing_events'") {
		t.Errorf("migrate sql --source wal lacks the publication or the slot:\n%s", r.stdout)
	}
	wantExit(t, run(t, noDB, "migrate", "sql", "--source", "kafka"), ExitUsage)
}

// walSchema is a fresh schema whose WAL source objects the test must leave
// dropped (they are dropped when it ends), and a pool on the database.
func walSchema(t *testing.T) (string, ident.Names, wal.Names, *pgxpool.Pool) {
	t.Helper()
	schema := testdb.Logical(t).Schema(t)
	in, err := ident.New(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := testdb.Logical(t)
	n := wal.NamesFor(in, srv.DatabaseName())
	srv.ReplicationObjects(t, n.Slot, n.Publication)
	pool := srv.Pool(t, "")
	t.Cleanup(func() { _ = wal.Drop(context.Background(), pool, n) })
	return schema, in, n, pool
}

// migrate --source wal creates the publication and slot once; drop-wal
// removes them; a role without REPLICATION gets exit 2 naming it.
func TestMigrateSourceWAL(t *testing.T) {
	t.Parallel()
	schema, _, n, pool := walSchema(t)

	r := run(t, walEnv(t), "migrate", "--source", "wal", "--schema", schema)
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "replication slot "+n.Slot+" (created)") {
		t.Errorf("first migrate --source wal:\n%s", r)
	}
	st, err := wal.Inspect(context.Background(), pool, n)
	if err != nil || !st.Exists {
		t.Fatalf("slot after migrate --source wal: %+v, %v", st, err)
	}
	r = run(t, walEnv(t), "migrate", "--source", "wal", "--schema", schema)
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "replication slot "+n.Slot+" (exists)") {
		t.Errorf("second migrate --source wal:\n%s", r)
	}
	// The table is set up for the WAL source: a table source refuses it,
	// naming both ways out.
	if full, err := wal.HasTableSourceIndexes(context.Background(), pool, n); err != nil || full {
		t.Errorf("table source's indexes after migrate --source wal: %v, %v", full, err)
	}
	r = run(t, walEnv(t), "relay", "--broker", "stdout:", "--schema", schema)
	wantExit(t, r, ExitNotMigrated)
	for _, want := range []string{"set up for the WAL source", "--source wal", "outbox migrate drop-wal"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("table relay on a table set up for the WAL source: stderr lacks %q:\n%s", want, r.stderr)
		}
	}

	// A role without REPLICATION, allowed everything else on the table.
	ctx := context.Background()
	dbURL := noReplicationRole(t, "pgoutbox_cli_norepl_", schema, "ALL", "ALL")
	r = run(t, map[string]string{"DATABASE_URL": dbURL}, "migrate", "--source", "wal", "--schema", schema)
	wantExit(t, r, ExitUsage)
	if !strings.Contains(r.stderr, "REPLICATION privilege") || !strings.Contains(r.stderr, "ALTER ROLE") {
		t.Errorf("migrate --source wal without REPLICATION:\n%s", r)
	}
	// The check comes first: a schema that is not migrated stays so.
	fresh := testdb.NewSchemaName("t")
	t.Cleanup(func() { testdb.Logical(t).Drop(t, fresh) })
	r = run(t, map[string]string{"DATABASE_URL": dbURL}, "migrate", "--source", "wal", "--schema", fresh)
	wantExit(t, r, ExitUsage)
	var migrated bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, fresh).Scan(&migrated); err != nil || migrated {
		t.Errorf("migrate --source wal without REPLICATION created schema %s (%v)", fresh, err)
	}

	r = run(t, walEnv(t), "migrate", "drop-wal", "--schema", schema)
	wantExit(t, r, ExitOK)
	if st, err := wal.Inspect(ctx, pool, n); err != nil || st.Exists {
		t.Fatalf("slot after drop-wal: %+v, %v", st, err)
	}
	if full, err := wal.HasTableSourceIndexes(ctx, pool, n); err != nil || !full {
		t.Errorf("table source's indexes after drop-wal: %v, %v", full, err)
	}
}

// migrate --source wal --partitioned creates the table partitioned; the
// flag needs --source wal, and an existing unpartitioned table is refused
// with exit 2, unchanged.
func TestMigratePartitionedCLI(t *testing.T) {
	t.Parallel()
	wantExit(t, run(t, map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none"}, "migrate", "sql", "--partitioned"), ExitUsage)
	schema, in, _, pool := walSchema(t)

	r := run(t, walEnv(t), "migrate", "--source", "wal", "--partitioned", "--schema", schema)
	wantExit(t, r, ExitOK)
	var kind string
	if err := pool.QueryRow(context.Background(), `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, in.QTable).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("table kind %q, %v after migrate --partitioned; want p", kind, err)
	}

	plain := testdb.Logical(t).Schema(t)
	wantExit(t, run(t, walEnv(t), "migrate", "--schema", plain), ExitOK)
	r = run(t, walEnv(t), "migrate", "--source", "wal", "--partitioned", "--schema", plain)
	wantExit(t, r, ExitUsage)
	if !strings.Contains(r.stderr, "not partitioned") {
		t.Errorf("migrate --partitioned on an existing table:\n%s", r)
	}
}
