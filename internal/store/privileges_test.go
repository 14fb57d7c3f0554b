package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// Check names the first privilege a role lacks, table-level or column
// by column, and the schema's USAGE before anything in it.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	super := testdb.Pool(t, "")
	qs := pgx.Identifier{schema}.Sanitize()
	role := "pgoutbox_check_" + strings.TrimPrefix(schema, "t_")
	qr := pgx.Identifier{role}.Sanitize()
	exec := func(q string) {
		t.Helper()
		if _, err := super.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE TABLE " + qs + ".outbox_events (id int, processed_at timestamptz, attempts int, last_error text, retry_after timestamptz, dead_at timestamptz, held_by uuid, deliver_at timestamptz)")
	exec("CREATE ROLE " + qr)
	t.Cleanup(func() { exec("DROP OWNED BY " + qr + "; DROP ROLE " + qr) })
	n, err := ident.New(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	check := func() error {
		t.Helper()
		tx, err := super.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+qr); err != nil {
			t.Fatal(err)
		}
		return store.Check(ctx, tx, n, store.RelayJob(n, false, true))
	}
	want := func(grant string) {
		t.Helper()
		err := check()
		var pe *store.PrivilegeError
		if grant == "" {
			if err != nil {
				t.Fatalf("Check = %v; want nil", err)
			}
			return
		}
		if !errors.As(err, &pe) || !errors.Is(err, store.ErrPrivilege) || !strings.Contains(err.Error(), grant) {
			t.Fatalf("Check = %v; want a PrivilegeError naming %q", err, grant)
		}
	}
	tbl := qs + `."outbox_events"`
	want("GRANT USAGE ON SCHEMA " + qs + " TO " + qr)
	exec("GRANT USAGE ON SCHEMA " + qs + " TO " + qr)
	want("GRANT SELECT ON " + tbl + " TO " + qr)
	exec("GRANT SELECT ON " + qs + ".outbox_events TO " + qr)
	want("GRANT UPDATE ON " + tbl + " TO " + qr)
	exec("GRANT UPDATE (processed_at, attempts, last_error, retry_after, dead_at, held_by) ON " + qs + ".outbox_events TO " + qr)
	want("GRANT UPDATE ON " + tbl + " TO " + qr) // deliver_at is missing
	exec("GRANT UPDATE (deliver_at) ON " + qs + ".outbox_events TO " + qr)
	want("GRANT DELETE ON " + tbl + " TO " + qr)
	exec("GRANT DELETE ON " + qs + ".outbox_events TO " + qr)
	want("")
}

// The check reaches pg_class and pg_namespace through their indexes: a
// sequential scan of a catalog that DDL has bloated can outlast a tight
// statement_timeout, and the relay would never start (found by the
// reliability suite's scenario 11 on a loaded machine).
func TestCheckUsesCatalogIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, "")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema}.Sanitize()+".outbox_events (id int)"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, schema string }{{"named schema", schema}, {"search_path", ""}} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off; SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+store.PrivilegeCheckSQL, c.schema, "outbox_events", "SELECT", []string{"id"})
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		for _, catalog := range []string{"pg_class", "pg_namespace"} {
			if strings.Contains(text, "Seq Scan on "+catalog) {
				t.Errorf("%s: the check scans %s sequentially:\n%s", c.name, catalog, text)
			}
		}
		_ = tx.Rollback(ctx)
	}
}
