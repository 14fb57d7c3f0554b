// Command schedule measures what events scheduled for later delivery cost
// the live drain: the time a relay takes to drain a backlog of unscheduled
// events, on a table without scheduled rows and on one holding -scheduled
// rows due in 30 days (inserted before the backlog, so they sit below it in
// seq order). Runs alternate between the two tables; it prints each run and
// the ratio of the medians.
//
//	go run ./bench/schedule -runs 3 -scheduled 1000000 -events 50000
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/memory"
)

func main() {
	dsn := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"), "PostgreSQL URL")
	runs := flag.Int("runs", 3, "runs per table")
	scheduled := flag.Int("scheduled", 1_000_000, "rows scheduled in the future on the second table")
	events := flag.Int("events", 50_000, "unscheduled events to drain per run")
	flag.Parse()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var base, sched []time.Duration
	for i := range *runs {
		for _, n := range []int{0, *scheduled} {
			d, err := run(ctx, pool, fmt.Sprintf("bench_sched_%d_%d", i, n), n, *events)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("run %d: %d scheduled rows: drained %d events in %v (%.0f events/s)\n",
				i+1, n, *events, d.Round(time.Millisecond), float64(*events)/d.Seconds())
			if n == 0 {
				base = append(base, d)
			} else {
				sched = append(sched, d)
			}
		}
	}
	mb, ms := median(base), median(sched)
	fmt.Printf("median drain: %v without, %v with %d scheduled rows: ratio %.3f\n",
		mb.Round(time.Millisecond), ms.Round(time.Millisecond), *scheduled, float64(ms)/float64(mb))
}

// run drains events unscheduled events from a fresh table in schema that
// holds scheduled future rows, and returns the drain's duration.
func run(ctx context.Context, pool *pgxpool.Pool, schema string, scheduled, events int) (time.Duration, error) {
	qs := ident.Quote(schema)
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+qs+` CASCADE`); err != nil {
		return 0, err
	}
	defer pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA IF EXISTS `+qs+` CASCADE`)
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		return 0, err
	}
	t := qs + `.outbox_events`
	// Time-ordered ids, as the Writer generates (UUIDv7 layout: 48-bit
	// milliseconds first), so the primary key sees the same locality.
	insert := `INSERT INTO ` + t + ` (id, aggregate_type, aggregate_id, event_type, payload, deliver_at)
SELECT encode(overlay(uuid_send(gen_random_uuid())
         PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
         FROM 1 FOR 6), 'hex')::uuid,
       'order', 'o-' || g, 'order.created', '{"n":1}', $2::timestamptz
FROM generate_series(1, $1) AS g`
	if scheduled > 0 {
		if _, err := pool.Exec(ctx, insert, scheduled, time.Now().Add(30*24*time.Hour)); err != nil {
			return 0, err
		}
	}
	if _, err := pool.Exec(ctx, insert, events, nil); err != nil {
		return 0, err
	}
	// The drain starts from a clean slate: no dead rows, statistics
	// current, the inserts' dirty pages flushed (so a checkpoint does not
	// land in the middle of one table's drain and not the other's).
	for _, stmt := range []string{`VACUUM ANALYZE ` + t, `CHECKPOINT`} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return 0, err
		}
	}
	r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Schema: schema})
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(rctx) }()
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL`).Scan(&left); err != nil {
			cancel()
			return 0, err
		}
		if left == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		return 0, err
	}
	var early int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE deliver_at IS NOT NULL AND processed_at IS NOT NULL`).Scan(&early); err != nil {
		return 0, err
	}
	if early > 0 {
		return 0, fmt.Errorf("%d scheduled rows published early", early)
	}
	return d, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
