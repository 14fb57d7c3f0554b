// Command retention measures what keeping delivered rows in the outbox table
// costs: the table's and its indexes' sizes, the relay's claim and drain
// with the rows retained against the same on an empty table, and removing
// old rows by cleanup (bounded DELETE) or archiving (bounded move), with the
// dead tuples they leave and the VACUUM that reclaims them.
//
// It works in a database of its own, created and dropped by the run:
//
//	go run ./bench/retention                  # 10M retained rows
//	go run ./bench/retention --rows 1000000   # quicker
//
// The machine may be shared: compare the ratios of one run, not absolute
// figures across runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

func main() {
	var (
		url     = flag.String("url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "a database to create the benchmark's database from")
		rows    = flag.Int("rows", 10_000_000, "delivered rows retained")
		pending = flag.Int("pending", 100_000, "pending rows drained on top")
		remove  = flag.Int("remove", 1_000_000, "oldest rows removed by cleanup, then as many archived")
		rounds  = flag.Int("rounds", 3, "rounds of the queue measurements, alternating the two tables")
		batch   = flag.Int("batch", 1000, "cleanup and archive batch size")
		keep    = flag.Bool("keep", false, "keep the benchmark's database")
	)
	flag.Parse()
	ctx := context.Background()
	b, err := newBench(ctx, *url, *keep)
	if err != nil {
		log.Fatal(err)
	}
	defer b.close(ctx)
	if err := b.run(ctx, *rows, *pending, *remove, *batch, *rounds); err != nil {
		log.Fatal(err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type bench struct {
	admin *pgxpool.Pool // on the server's database, to create and drop ours
	pool  *pgxpool.Pool
	db    string
	keep  bool
}

// table is one outbox table of the run: "empty" holds only the queue,
// "retained" the queue on top of the retained rows.
type table struct {
	schema  string
	q       *store.Queries
	counter int64 // next row index
}

func newBench(ctx context.Context, url string, keep bool) (*bench, error) {
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	db := fmt.Sprintf("pgoutbox_retention_%d", time.Now().UnixNano()%1e9)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident.Quote(db)); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Database = db
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &bench{admin: admin, pool: pool, db: db, keep: keep}, nil
}

func (b *bench) close(ctx context.Context) {
	b.pool.Close()
	if b.keep {
		log.Printf("kept database %s", b.db)
	} else if _, err := b.admin.Exec(ctx, "DROP DATABASE "+ident.Quote(b.db)+" WITH (FORCE)"); err != nil {
		log.Printf("drop database %s: %v", b.db, err)
	}
	b.admin.Close()
}

func (b *bench) newTable(ctx context.Context, schema string) (*table, error) {
	if _, err := outbox.Migrate(ctx, b.pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		return nil, err
	}
	n, err := ident.New(schema, "")
	if err != nil {
		return nil, err
	}
	// Autovacuum would run at unpredictable moments; the run vacuums
	// explicitly where the figures need it.
	if _, err := b.pool.Exec(ctx, `ALTER TABLE `+n.QTable+` SET (autovacuum_enabled = false)`); err != nil {
		return nil, err
	}
	return &table{schema: schema, q: store.New(n, false)}, nil
}

func (t *table) qt() string { return ident.Quote(t.schema) + ".outbox_events" }

// retainedBase is when the first retained row was processed; the others
// follow one per 100 ms, so "older than" selects the oldest ones.
var retainedBase = time.Now().Add(-30 * 24 * time.Hour)

const retainedFrom = 1 << 40 // index of the first retained row

// insert adds n rows in one INSERT ... SELECT: time-ordered ids as the
// Writer's UUIDv7, processed (retained) or pending.
func (b *bench) insert(ctx context.Context, t *table, n int, processed bool) error {
	proc := "NULL::timestamptz"
	if processed {
		proc = "$3::timestamptz + (i - $4::bigint) * interval '100 milliseconds'"
	}
	from := t.counter
	t.counter += int64(n)
	args := []any{from, t.counter}
	if processed {
		args = append(args, retainedBase, int64(retainedFrom))
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO `+t.qt()+` (id, aggregate_type, aggregate_id, event_type, payload, created_at, processed_at)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 'order', (i % 10000)::text, 'order.created',
       jsonb_build_object('order_id', i::text, 'customer_id', 'c' || (i % 1000), 'total', 4999),
       now() - interval '1 hour', `+proc+`
FROM generate_series($1::bigint, $2::bigint - 1) i`, args...)
	return err
}

type sizes struct{ table, indexes int64 }

func (b *bench) sizes(ctx context.Context, rel string) (s sizes, idx string, err error) {
	err = b.pool.QueryRow(ctx, `SELECT pg_table_size($1), pg_indexes_size($1)`, rel).Scan(&s.table, &s.indexes)
	if err != nil {
		return s, "", err
	}
	rows, err := b.pool.Query(ctx, `SELECT c.relname, pg_relation_size(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass ORDER BY 1`, rel)
	if err != nil {
		return s, "", err
	}
	var parts []string
	var name string
	var size int64
	_, err = pgx.ForEachRow(rows, []any{&name, &size}, func() error {
		parts = append(parts, fmt.Sprintf("%s %s", name, mb(size)))
		return nil
	})
	return s, strings.Join(parts, ", "), err
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

// claimP50 times the unordered claim from the start of the ready index
// (the relay's rescan, the worst case) 200 times, each rolled back.
func (b *bench) claimP50(ctx context.Context, t *table) (time.Duration, error) {
	var ds []time.Duration
	for range 200 {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		rows, err := tx.Query(ctx, t.q.Claim, 100, 0)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		ds = append(ds, time.Since(start))
		_ = tx.Rollback(ctx)
		if err != nil {
			return 0, err
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], nil
}

// drain publishes every pending row through a relay whose publisher
// confirms at once, and returns events per second.
func (b *bench) drain(ctx context.Context, t *table, n int, ordered bool) (float64, error) {
	r, err := outbox.NewRelay(b.pool, outbox.PublisherFunc(func(context.Context, *outbox.Message) error { return nil }),
		outbox.RelayConfig{Schema: t.schema, Ordered: ordered})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	done := 0
	for done < n {
		res, err := r.ProcessBatch(ctx)
		if err != nil {
			return 0, err
		}
		if res.Claimed == 0 {
			break
		}
		done += res.Published
	}
	if done != n {
		return 0, fmt.Errorf("drain published %d of %d", done, n)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// queue is one round's queue figures on one table.
type queue struct {
	claim               time.Duration
	drain, drainOrdered float64
}

// measureQueue fills pending rows, times the claim, drains them unordered,
// fills again and drains ordered, then deletes the drained rows (so the
// retained count stays the same) and vacuums.
func (b *bench) measureQueue(ctx context.Context, t *table, pending int) (m queue, err error) {
	from := t.counter
	for _, ordered := range []bool{false, true} {
		if err = b.insert(ctx, t, pending, false); err != nil {
			return m, err
		}
		if _, err = b.pool.Exec(ctx, `VACUUM ANALYZE `+t.qt()); err != nil {
			return m, err
		}
		if !ordered {
			if m.claim, err = b.claimP50(ctx, t); err != nil {
				return m, err
			}
		}
		rate, err := b.drain(ctx, t, pending, ordered)
		if err != nil {
			return m, err
		}
		if ordered {
			m.drainOrdered = rate
		} else {
			m.drain = rate
		}
	}
	if _, err = b.pool.Exec(ctx, `DELETE FROM `+t.qt()+` WHERE id >= ('00000000-0000-7000-8000-' || lpad(to_hex($1::bigint), 12, '0'))::uuid`, from); err != nil {
		return m, err
	}
	_, err = b.pool.Exec(ctx, `VACUUM ANALYZE `+t.qt())
	return m, err
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

func (b *bench) run(ctx context.Context, rows, pending, remove, batch, rounds int) error {
	empty, err := b.newTable(ctx, "empty")
	if err != nil {
		return err
	}
	full, err := b.newTable(ctx, "retained")
	if err != nil {
		return err
	}
	full.counter = retainedFrom
	start := time.Now()
	const chunk = 1_000_000
	for done := 0; done < rows; done += chunk {
		if err := b.insert(ctx, full, min(chunk, rows-done), true); err != nil {
			return err
		}
		log.Printf("retained rows: %d [%s]", done+min(chunk, rows-done), time.Since(start).Round(time.Second))
	}
	if _, err := b.pool.Exec(ctx, `VACUUM ANALYZE `+full.qt()); err != nil {
		return err
	}
	fill := time.Since(start)
	full.counter = 1 << 41 // the queue's ids after the retained rows'

	// Rounds alternate the two tables, so both see the same machine; the
	// ratios are per round, their median reported.
	var claimR, drainR, orderedR []float64
	var last [2]queue
	for i := range rounds {
		for j, t := range []*table{empty, full} {
			q, err := b.measureQueue(ctx, t, pending)
			if err != nil {
				return err
			}
			last[j] = q
			log.Printf("round %d %s: claim %s, drain %.0f ev/s, ordered %.0f ev/s", i+1, t.schema, q.claim, q.drain, q.drainOrdered)
		}
		claimR = append(claimR, float64(last[1].claim)/float64(last[0].claim))
		drainR = append(drainR, last[1].drain/last[0].drain)
		orderedR = append(orderedR, last[1].drainOrdered/last[0].drainOrdered)
	}
	esz, _, err := b.sizes(ctx, empty.qt())
	if err != nil {
		return err
	}
	fsz, idx, err := b.sizes(ctx, full.qt())
	if err != nil {
		return err
	}

	// Cleanup: the oldest rows, bounded DELETEs; then VACUUM.
	a, err := admin.New(b.pool, admin.Config{Schema: full.schema})
	if err != nil {
		return err
	}
	// processed_at < now() - older  <=>  processed_at < retainedBase + remove × 100 ms
	cutoff := retainedBase.Add(time.Duration(remove) * 100 * time.Millisecond)
	start = time.Now()
	deleted, err := a.Cleanup(ctx, time.Since(cutoff), batch, nil)
	if err != nil {
		return err
	}
	cleanupTime := time.Since(start)
	fullQ := *full
	claimAfterDelete, err := b.claimWith(ctx, &fullQ, pending)
	if err != nil {
		return err
	}
	full.counter = fullQ.counter
	start = time.Now()
	if _, err := b.pool.Exec(ctx, `VACUUM `+full.qt()); err != nil {
		return err
	}
	vacuumTime := time.Since(start)
	afterCleanup, _, err := b.sizes(ctx, full.qt())
	if err != nil {
		return err
	}

	// Archive: the next oldest rows, bounded moves; then VACUUM.
	start = time.Now()
	moved, err := a.Archive(ctx, time.Since(cutoff.Add(time.Duration(remove)*100*time.Millisecond)), batch, nil)
	if err != nil {
		return err
	}
	archiveTime := time.Since(start)
	start = time.Now()
	if _, err := b.pool.Exec(ctx, `VACUUM `+full.qt()); err != nil {
		return err
	}
	archVacuum := time.Since(start)
	arch, _, err := b.sizes(ctx, ident.Quote(full.schema)+".outbox_events_archive")
	if err != nil {
		return err
	}

	fmt.Printf("\n## Retention: %d delivered rows kept (%s, %d rounds)\n\n", rows, time.Now().UTC().Format("2006-01-02"), rounds)
	fmt.Printf("go run ./bench/retention --rows %d --pending %d --remove %d --batch %d --rounds %d\n\n", rows, pending, remove, batch, rounds)
	fmt.Printf("Retained rows filled in %s (INSERT ... SELECT, 1M rows a statement, then VACUUM ANALYZE).\n\n", fill.Round(time.Second))
	fmt.Println("| | empty table | " + fmt.Sprint(rows) + " retained | retained / empty (median of rounds) |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| table (heap) | %s | %s | |\n", mb(esz.table), mb(fsz.table))
	fmt.Printf("| indexes | %s | %s | |\n", mb(esz.indexes), mb(fsz.indexes))
	fmt.Printf("| claim p50, 100 rows from the start of the ready index (%d pending), last round | %s | %s | %.2f |\n",
		pending, last[0].claim.Round(time.Microsecond), last[1].claim.Round(time.Microsecond), median(claimR))
	fmt.Printf("| drain, unordered (%d events), last round | %.0f ev/s | %.0f ev/s | %.2f |\n", pending, last[0].drain, last[1].drain, median(drainR))
	fmt.Printf("| drain, ordered (%d events), last round | %.0f ev/s | %.0f ev/s | %.2f |\n", pending, last[0].drainOrdered, last[1].drainOrdered, median(orderedR))
	fmt.Printf("\nIndexes with %d retained: %s.\n\n", rows, idx)
	fmt.Println("| removal of the oldest rows | rows | time | rows/s | then |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| cleanup (DELETE, %d a batch) | %d | %s | %.0f | claim p50 before VACUUM %s; VACUUM %s; heap stays %s (space reused, not returned) |\n",
		batch, deleted, cleanupTime.Round(time.Millisecond), float64(deleted)/cleanupTime.Seconds(),
		claimAfterDelete.Round(time.Microsecond), vacuumTime.Round(time.Millisecond), mb(afterCleanup.table))
	fmt.Printf("| archive (move, %d a batch) | %d | %s | %.0f | VACUUM %s; archive table %s + indexes %s |\n",
		batch, moved, archiveTime.Round(time.Millisecond), float64(moved)/archiveTime.Seconds(),
		archVacuum.Round(time.Millisecond), mb(arch.table), mb(arch.indexes))
	return nil
}

// claimWith times the claim with pending rows on top of what the table
// holds now, then removes them.
func (b *bench) claimWith(ctx context.Context, t *table, pending int) (time.Duration, error) {
	from := t.counter
	if err := b.insert(ctx, t, pending, false); err != nil {
		return 0, err
	}
	d, err := b.claimP50(ctx, t)
	if err != nil {
		return 0, err
	}
	_, err = b.pool.Exec(ctx, `DELETE FROM `+t.qt()+` WHERE processed_at IS NULL AND id >= ('00000000-0000-7000-8000-' || lpad(to_hex($1::bigint), 12, '0'))::uuid`, from)
	return d, err
}
