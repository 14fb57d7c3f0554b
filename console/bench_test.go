package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/console"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// benchSeed fills table with rows events in one statement: all but the last
// 2% published (one every 50 ms, so about 72,000 in the last hour), the rest
// pending, one in ten of those a dead letter with one of four errors, the
// pending rows spread over 2,000 aggregates so that dead letters block
// later events.
const benchSeed = `INSERT INTO {T} (id, aggregate_type, aggregate_id, event_type, payload, headers, attempts,
    created_at, processed_at, dead_at, last_error)
SELECT gen_random_uuid(),
       CASE WHEN i % 3 = 0 THEN 'customer' ELSE 'order' END,
       CASE WHEN i > $1 * 0.98 THEN 'agg-p' || (i % 2000) ELSE 'agg-' || (i % 50000) END,
       (ARRAY['order.created','order.paid','order.shipped','order.cancelled',
              'customer.registered','customer.updated','invoice.issued','invoice.paid'])[i % 8 + 1],
       jsonb_build_object('n', i, 'amount', i % 1000, 'currency', 'EUR'),
       jsonb_build_object('traceparent', '00-' || md5(i::text) || '-01'),
       CASE WHEN i > $1 * 0.98 AND i % 10 = 0 THEN 10 ELSE 0 END,
       now() - ($1 - i) * interval '50 milliseconds',
       CASE WHEN i <= $1 * 0.98 THEN now() - ($1 - i) * interval '50 milliseconds' + interval '20 milliseconds' END,
       CASE WHEN i > $1 * 0.98 AND i % 10 = 0 THEN now() - ($1 - i) * interval '50 milliseconds' + interval '1 second' END,
       CASE WHEN i > $1 * 0.98 AND i % 10 = 0 THEN
         (ARRAY['broker: connection refused to 10.0.0.' || (i % 250),
                'schema registry: subject order-value version ' || (i % 7) || ' not found',
                'payload too large: ' || (i * 13) || ' bytes',
                'permanent: invalid topic name for aggregate ' || i])[(i / 10) % 4 + 1] END
FROM generate_series(1, $1::int) AS i`

// BenchmarkConsolePages renders every page against a table of
// OUTBOX_CONSOLE_BENCH_ROWS rows (default 1,000,000), seeded once in a
// schema of its own. Each page must render within 200 ms.
func BenchmarkConsolePages(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("OUTBOX_CONSOLE_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("OUTBOX_CONSOLE_BENCH_ROWS=%q: want a number of at least 1000", v)
		}
		rows = n
	}
	schema := testdb.Schema(b)
	pool := testdb.Pool(b, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		b.Fatal(err)
	}
	table := pgx.Identifier{schema, outbox.DefaultTable}.Sanitize()
	start := time.Now()
	if _, err := pool.Exec(ctx, strings.ReplaceAll(benchSeed, "{T}", table), rows); err != nil {
		b.Fatal(err)
	}
	// As autovacuum would leave it: statistics and the visibility map.
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d rows in %s", rows, time.Since(start).Round(time.Second))

	c, err := console.New(pool, console.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	adm, err := admin.New(pool, admin.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	groups, err := adm.DeadLetterGroups(ctx, false)
	if err != nil || len(groups) == 0 {
		b.Fatalf("groups: %v %v", groups, err)
	}
	g := groups[0]
	var published, pending string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM `+table+` WHERE processed_at IS NOT NULL ORDER BY seq LIMIT 1 OFFSET 1000`).Scan(&published); err != nil {
		b.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT aggregate_id FROM `+table+` WHERE dead_at IS NOT NULL LIMIT 1`).Scan(&pending); err != nil {
		b.Fatal(err)
	}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"dead-letters", "/dead-letters"},
		{"dead-letters-by-error", "/dead-letters?by=error"},
		{"group", "/dead-letters/group?type=" + url.QueryEscape(g.EventType) + "&error=" + url.QueryEscape(g.Error)},
		{"confirm-group", "/confirm?action=retry&scope=group&type=" + url.QueryEscape(g.EventType) + "&error=" + url.QueryEscape(g.Error)},
		{"event", "/events/" + g.SampleID.String()},
		{"event-published", "/events/" + published},
		{"timeline-blocked", "/aggregates?id=" + pending},
		{"timeline-published", "/aggregates?type=order&id=agg-123"},
		{"search-id", "/search?q=" + published},
		{"search-aggregate", "/search?q=agg-123"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var slowest, total time.Duration
			n := 0
			for b.Loop() {
				t0 := time.Now()
				w := httptest.NewRecorder()
				c.ServeHTTP(w, httptest.NewRequest("GET", p.path, nil))
				if w.Code != http.StatusOK && w.Code != http.StatusSeeOther {
					b.Fatalf("%s: %d %s", p.path, w.Code, w.Body.String())
				}
				d := time.Since(t0)
				slowest, total, n = max(slowest, d), total+d, n+1
			}
			b.ReportMetric(float64(slowest.Microseconds())/1000, "max-ms")
			// The mean, not the slowest: one render can wait behind anything
			// else the machine runs.
			if mean := total / time.Duration(n); mean > 200*time.Millisecond {
				b.Errorf("%s: renders in %s on average, want within 200ms", p.path, mean)
			}
		})
	}
}
