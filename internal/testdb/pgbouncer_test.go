package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The helper's PgBouncer pools in transaction mode: its clients share
// server connections, so one client's session setting is seen by the next
// client's transaction on the same server connection, and the backend a
// client talks to is not the one whose key it got at startup.
func TestPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pb := PgBouncer(t)
	cfg, err := pgx.ParseConfig(pb.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	a, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect through PgBouncer: %v", err)
	}
	defer a.Close(ctx)
	var pidA uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid(), set_config('pgoutbox.probe', 'a', false)").Scan(&pidA, new(string)); err != nil {
		t.Fatal(err)
	}
	if pidA == a.PgConn().PID() {
		t.Errorf("pg_backend_pid() = the startup key's PID %d: not behind a pooler", pidA)
	}
	b, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	var pidB uint32
	var probe string
	if err := b.QueryRow(ctx, "SELECT pg_backend_pid(), coalesce(current_setting('pgoutbox.probe', true), '')").Scan(&pidB, &probe); err != nil {
		t.Fatal(err)
	}
	if pidB != pidA || probe != "a" {
		t.Errorf("second client: backend %d, probe %q; want the first client's backend %d and its session setting \"a\" (transaction pooling)", pidB, probe, pidA)
	}

	admin := *cfg
	admin.Database = "pgbouncer"
	ac, err := pgx.ConnectConfig(ctx, &admin)
	if err != nil {
		t.Fatalf("admin console: %v", err)
	}
	defer ac.Close(ctx)
	rows, err := ac.Query(ctx, "SHOW CONFIG")
	if err != nil {
		t.Fatal(err)
	}
	mode := ""
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if vals[0] == "pool_mode" {
			mode, _ = vals[1].(string)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if mode != "transaction" {
		t.Errorf("pool_mode = %q, want transaction", mode)
	}
}
