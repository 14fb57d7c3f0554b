package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestMarksFindRowsByKeyAsTheTableGrows: a relay that started on a tiny
// table and marked events there (enough executions for PostgreSQL to
// cache a generic plan of its prepared statements) keeps finding the rows
// it marks by key once the table has grown, with no ANALYZE in between
// (autovacuum is off on the test server): no statement of the relay reads
// the whole table.
func TestMarksFindRowsByKeyAsTheTableGrows(t *testing.T) {
	t.Parallel()
	// A database of its own: the schemas that the tests running beside it
	// create and drop would reset the cached plans in a shared one, and
	// hide what this test looks for.
	dbURL := testdb.Database(t)
	open := func(app string, maxConns int32) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = maxConns
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	pool := open("test", 2)
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{}); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	write := func() {
		t.Helper()
		err := pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
			_, err := w.Write(ctx(t), tx, event("o-1", 1))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	rpool := open("relay", 3) // few connections, each runs the mark many times
	pub := memory.New()
	r, err := outbox.NewRelay(rpool, pub, outbox.RelayConfig{Workers: 1, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()

	// One claim and one mark per event while the table holds a few rows.
	const small = 60
	for i := range small {
		write()
		if err := pub.WaitDistinct(ctx(t), i+1); err != nil {
			t.Fatal(err)
		}
	}
	const grown = 100_000
	if _, err := pool.Exec(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, processed_at)
SELECT 'order', 'history', 'order.created', '{}', now() FROM generate_series(1, $1)`, grown); err != nil {
		t.Fatal(err)
	}
	const more = 30
	for i := range more {
		write()
		if err := pub.WaitDistinct(ctx(t), small+i+1); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Relay.Run: %v", err)
	}
	rpool.Close()

	// A backend reports its table statistics when it exits.
	var sessions int
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d still open", sessions) }), 10*time.Second,
		"the relay's sessions closed after its pool", func() bool {
			if err := pool.QueryRow(ctx(t), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'relay'`).Scan(&sessions); err != nil {
				t.Fatal(err)
			}
			return sessions == 0
		})
	var seqScans, seqRead int64
	if err := pool.QueryRow(ctx(t), `SELECT seq_scan, seq_tup_read FROM pg_stat_user_tables WHERE relid = 'outbox_events'::regclass`).Scan(&seqScans, &seqRead); err != nil {
		t.Fatal(err)
	}
	if seqRead >= grown {
		t.Fatalf("the relay's statements read %d rows in %d sequential scans of the outbox table: at least one scanned it whole after it grew to %d rows (a generic plan kept from when it was tiny)",
			seqRead, seqScans, grown+small+more)
	}
	if pub.Distinct() != small+more {
		t.Fatalf("published %d distinct events, want %d", pub.Distinct(), small+more)
	}
}
