package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
)

// BenchmarkDrain drains a backlog spread over 10,000 aggregates with 4
// workers, unordered and ordered; it reports events/s, so the cost of
// ordering reads as the ratio of the two.
//
//	go test -run '^$' -bench BenchmarkDrain -benchtime 50000x .
func BenchmarkDrain(b *testing.B) {
	for _, ordered := range []bool{false, true} {
		b.Run(fmt.Sprintf("ordered=%v", ordered), func(b *testing.B) { benchDrain(b, 10000, ordered) })
	}
}

// BenchmarkDrainFewAggregates is BenchmarkDrain with the backlog held by 20
// aggregates: ordered batches are runs, and one worker at a time holds an
// aggregate.
func BenchmarkDrainFewAggregates(b *testing.B) {
	for _, ordered := range []bool{false, true} {
		b.Run(fmt.Sprintf("ordered=%v", ordered), func(b *testing.B) { benchDrain(b, 20, ordered) })
	}
}

// benchDrain writes b.N events round-robin over aggregates, then times one
// relay with 4 workers draining them to the in-memory publisher.
func benchDrain(b *testing.B, aggregates int, ordered bool) {
	schema := testdb.Schema(b)
	pool := testdb.Pool(b, schema)
	c := context.Background()
	if _, err := outbox.Migrate(c, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		b.Fatal(err)
	}
	_, err := pool.Exec(c, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', (g % $2)::text, 'order.created', jsonb_build_object('n', g, 'pad', repeat('x', 200))
		FROM generate_series(1, $1) g`, b.N, aggregates)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(c, `ANALYZE outbox_events`); err != nil {
		b.Fatal(err)
	}
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, Workers: 4, Ordered: ordered})
	if err != nil {
		b.Fatal(err)
	}
	rc, cancel := context.WithCancel(c)
	b.ResetTimer()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.Run(rc) }()
	if err := pub.WaitDistinct(c, b.N); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
