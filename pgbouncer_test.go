package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
)

// execModes are pgx's query exec modes, as default_query_exec_mode names
// them.
var execModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

// bouncerEnv is a migrated schema on the shared server and a PgBouncer in
// transaction mode in front of it.
type bouncerEnv struct {
	*env
	bouncer *testdb.Server
}

func setupBouncer(t *testing.T) *bouncerEnv {
	t.Helper()
	e := setup(t)
	return &bouncerEnv{env: e, bouncer: e.srv.PgBouncer(t)}
}

// bouncerDSN is the URL through PgBouncer with default_query_exec_mode.
func (b *bouncerEnv) bouncerDSN(mode string) string {
	u := b.bouncer.URL()
	if mode == "" {
		return u
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "default_query_exec_mode=" + mode
}

// bouncerPool is a pool through PgBouncer in mode ("" for pgx's default),
// with more connections than PgBouncer has server connections, so clients
// share them; closed when the test ends.
func (b *bouncerEnv) bouncerPool(mode string) *pgxpool.Pool {
	b.t.Helper()
	cfg, err := pgxpool.ParseConfig(b.bouncerDSN(mode))
	if err != nil {
		b.t.Fatal(err)
	}
	cfg.MaxConns = 2 * testdb.PgBouncerPoolSize
	pool, err := pgxpool.NewWithConfig(ctx(b.t), cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(pool.Close)
	return pool
}

// concurrently runs f n times on each of workers goroutines and returns the
// first error.
func concurrently(workers, n int, f func(w, i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				if err := f(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// Every way of writing works through PgBouncer in transaction mode with
// each of pgx's exec modes: Write, Queue, WriteSQL and a plain INSERT, from
// more clients than PgBouncer has server connections.
func TestPgBouncerWriters(t *testing.T) {
	b := setupBouncer(t)
	const workers, per = 2 * testdb.PgBouncerPoolSize, 5
	want := 0
	for _, mode := range execModes {
		pool := b.bouncerPool(mode)
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		writers := []struct {
			name  string
			write func(ctx context.Context, w, i int) error
		}{
			{"Write", func(ctx context.Context, w, i int) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := b.writer.Write(ctx, tx, event(fmt.Sprintf("%s-w%d", mode, w), i), event(fmt.Sprintf("%s-w%d", mode, w), i))
					return err
				})
			}},
			{"Queue", func(ctx context.Context, w, i int) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					batch := &pgx.Batch{}
					if _, err := b.writer.Queue(ctx, batch, event(fmt.Sprintf("%s-q%d", mode, w), i), event(fmt.Sprintf("%s-q%d", mode, w), i)); err != nil {
						return err
					}
					return tx.SendBatch(ctx, batch).Close()
				})
			}},
			{"WriteSQL", func(ctx context.Context, w, i int) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if _, err := b.writer.WriteSQL(ctx, tx, event(fmt.Sprintf("%s-s%d", mode, w), i), event(fmt.Sprintf("%s-s%d", mode, w), i)); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			}},
			{"INSERT", func(ctx context.Context, w, i int) error {
				// The reference design's plain INSERT, autocommitted twice:
				// no transaction pins the server connection between them.
				for range 2 {
					_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{b.schema, "outbox_events"}.Sanitize()+
						` (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4)`,
						"order", fmt.Sprintf("%s-i%d", mode, w), "order.created", fmt.Sprintf(`{"n":%d}`, i))
					if err != nil {
						return err
					}
				}
				return nil
			}},
		}
		for _, wr := range writers {
			c := ctx(t)
			if err := concurrently(workers, per, func(w, i int) error { return wr.write(c, w, i) }); err != nil {
				t.Errorf("%s with default_query_exec_mode=%s through PgBouncer: %v", wr.name, mode, err)
				continue
			}
			want += workers * per * 2
		}
	}
	if got := b.count("true"); got != want {
		t.Errorf("%d rows in the table, want %d", got, want)
	}
}

// The table-source relay with its defaults delivers everything through
// PgBouncer in transaction mode, with pgx's default exec mode and with
// those the pgx documentation suggests for poolers; failed publishes are
// counted in attempts; nothing is logged at ERROR.
func TestPgBouncerRelay(t *testing.T) {
	for _, mode := range []string{"", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		name := mode
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			b := setupBouncer(t)
			const n = 300
			writer := b.bouncerPool("exec")
			evs := make([]outbox.Event, n)
			for i := range evs {
				evs[i] = event(fmt.Sprintf("o-%d", i%37), i)
			}
			if err := pgx.BeginFunc(ctx(t), writer, func(tx pgx.Tx) error {
				_, err := b.writer.Write(ctx(t), tx, evs...)
				return err
			}); err != nil {
				t.Fatalf("write: %v", err)
			}
			pub := memory.New()
			var (
				mu    sync.Mutex
				tried = map[string]bool{}
			)
			failed := errors.New("first try refused")
			// Every event whose payload's n is a multiple of 5 fails once.
			pub.FailWith(func(m *outbox.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if strings.Contains(string(m.Payload), `"n":`) && !tried[m.ID.String()] && nth(m.Payload)%5 == 0 {
					tried[m.ID.String()] = true
					return failed
				}
				return nil
			})
			logs := &syncBuffer{}
			r, err := outbox.NewRelay(b.bouncerPool(mode), pub, outbox.RelayConfig{Schema: b.schema, BatchSize: 50,
				RetryBackoff: outbox.Backoff{Base: 1e6, Max: 1e6}, // 1ms
				Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))})
			if err != nil {
				t.Fatal(err)
			}
			stop := b.run(r)
			if err := pub.WaitDistinct(ctx(t), n); err != nil {
				t.Fatalf("%d of %d delivered: %v\nlogs:\n%s", pub.Distinct(), n, err, logs.String())
			}
			stop()
			if got := b.count("processed_at IS NOT NULL"); got != n {
				t.Errorf("%d of %d rows processed", got, n)
			}
			wantFailed := 0
			for i := range n {
				if i%5 == 0 {
					wantFailed++
				}
			}
			if got := b.count("attempts = 1"); got != wantFailed {
				t.Errorf("%d rows with attempts = 1, want %d (each failed once)", got, wantFailed)
			}
			if got := b.count("attempts NOT IN (0, 1)"); got != 0 {
				t.Errorf("%d rows with attempts other than 0 or 1", got)
			}
			for id, c := range pub.Count() {
				if c > 1 {
					t.Errorf("event %s published %d times", id, c)
				}
			}
			if s := logs.String(); strings.Contains(s, "level=ERROR") {
				t.Errorf("the relay logged errors:\n%s", s)
			}
		})
	}
}

// nth is the "n" of a test event's payload.
func nth(payload []byte) int {
	var n int
	i := strings.Index(string(payload), `"n":`)
	fmt.Sscanf(string(payload[i+4:]), "%d", &n)
	return n
}

