package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/wal"
)

// drain measures how fast the Stream reads a backlog already in the WAL:
// n events are committed (txSize per transaction) while the slot exists and
// nobody reads it, then one stream reads and acknowledges them all. The
// figure is the reading side's ceiling: no broker, no table writes.
func drain(ctx context.Context, url string, n, txSize int, postmaster int) error {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "walcost_drain_" + hex.EncodeToString(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		return err
	}
	defer pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+ident.Quote(schema)+" CASCADE")
	in, _ := ident.New(schema, "outbox_events")
	names, err := wal.Resolve(ctx, pool, in)
	if err != nil {
		return err
	}
	if _, err := wal.Create(ctx, pool, names); err != nil {
		return err
	}
	defer wal.Drop(context.WithoutCancel(ctx), pool, names)

	start := time.Now()
	for done := 0; done < n; done += txSize {
		k := min(txSize, n-done)
		if _, err := pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', i::text, 'order.created', $1::jsonb FROM generate_series(1, $2) i`, string(payload("42")), k); err != nil {
			return err
		}
	}
	log.Printf("drain: %d events committed in %s (%d per transaction)", n, time.Since(start).Round(time.Millisecond), txSize)

	srv0, _ := serverCPU(postmaster)
	self0 := selfCPU()
	start = time.Now()
	s, err := wal.Open(ctx, wal.StreamConfig{ConnString: url, Names: names, Buffer: 64})
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	got := 0
	for got < n {
		tx, err := s.Next(ctx)
		if err != nil {
			return err
		}
		got += len(tx.Events)
		if err := s.Ack(tx.LSN); err != nil {
			return err
		}
	}
	el := time.Since(start)
	srv1, _ := serverCPU(postmaster)
	fmt.Printf("\ndrain: %d events read by one stream in %s: %.0f events/s; walsender and server %.1f µs/event, stream (this process) %.1f µs/event\n",
		got, el.Round(time.Millisecond), float64(got)/el.Seconds(),
		float64((srv1-srv0).Microseconds())/float64(got), float64((selfCPU()-self0).Microseconds())/float64(got))
	return nil
}
