package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/wal"
)

// harness runs one variant at a time in a schema of its own.
type harness struct {
	url        string
	postmaster int // the private cluster's postmaster, for its CPU time; 0 on a shared server
	admin      *pgxpool.Pool
	writers    int
	window     time.Duration
}

func newHarness(ctx context.Context, url string, writers int, window time.Duration, postmaster int) (*harness, error) {
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	var level string
	if err := admin.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		admin.Close()
		return nil, err
	}
	if level != "logical" {
		admin.Close()
		return nil, fmt.Errorf("wal_level is %s, the stream variants need logical", level)
	}
	return &harness{url: url, admin: admin, writers: writers, window: window, postmaster: postmaster}, nil
}

func (h *harness) close() { h.admin.Close() }

// result is one run of one variant.
type result struct {
	committed  int64
	elapsed    time.Duration
	behind     int64         // events committed but not yet received by the consumer when the writers stopped
	walBytes   int64         // WAL written from the writers' start until the consumer caught up (the whole server's)
	serverCPU  time.Duration // the private cluster's CPU time over the same span (0 on a shared server)
	selfCPU    time.Duration // this process's: writers' client side and the consumer
	vacuums    int64         // autovacuums of the outbox table (or its partitions) during the run
	tableBytes int64         // what the outbox table with its indexes (and partitions) grew by during the run; -1 without one
}

func (r result) perSec() float64 { return float64(r.committed) / r.elapsed.Seconds() }

// per divides a total by the orders committed.
func (r result) per(total float64) float64 {
	if r.committed == 0 {
		return 0
	}
	return total / float64(r.committed)
}

// env is what a variant's parts share during a run.
type env struct {
	h        *harness
	schema   string
	pool     *pgxpool.Pool // search_path = schema
	names    wal.Names
	received atomic.Int64 // events the consumer received
	mu       sync.Mutex
	acked    []uuid.UUID // events the consumer settled, for the deleter
	ackedSeq []int64     // their seqs, for the truncater
}

// run sets up v in a fresh schema, runs its consumer and maintenance while
// the writers write for the window, and tears everything down.
func (h *harness) run(ctx context.Context, v variant) (res result, err error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &env{h: h, schema: "walcost_" + hex.EncodeToString(b)}
	if _, err := h.admin.Exec(ctx, "CREATE SCHEMA "+ident.Quote(e.schema)); err != nil {
		return res, err
	}
	defer func() {
		if _, derr := h.admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+ident.Quote(e.schema)+" CASCADE"); derr != nil && err == nil {
			err = derr
		}
	}()
	cfg, err := pgxpool.ParseConfig(h.url)
	if err != nil {
		return res, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = e.schema
	cfg.MaxConns = int32(h.writers + 2)
	if e.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return res, err
	}
	defer e.pool.Close()
	if _, err := e.pool.Exec(ctx, ordersSQL); err != nil {
		return res, err
	}
	if v.migrate {
		if _, err := outbox.Migrate(ctx, e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil {
			return res, err
		}
	}
	if v.ddl != "" {
		if _, err := e.pool.Exec(ctx, v.ddl); err != nil {
			return res, fmt.Errorf("ddl: %w", err)
		}
	}
	empty, err := e.tableBytes(ctx, v)
	if err != nil {
		return res, err
	}
	in, _ := ident.New(e.schema, "outbox_events")
	if e.names, err = wal.Resolve(ctx, h.admin, in); err != nil {
		return res, err
	}
	if v.consume != nil {
		if _, err := wal.Create(ctx, h.admin, e.names); err != nil {
			return res, err
		}
		defer func() {
			if derr := wal.Drop(context.WithoutCancel(ctx), h.admin, e.names); derr != nil && err == nil {
				err = derr
			}
		}()
	}
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	var wg sync.WaitGroup
	bgErr := make(chan error, 2)
	for _, f := range []func(context.Context, *env) error{v.consume, v.maintain} {
		if f == nil {
			continue
		}
		wg.Go(func() {
			if err := f(bg, e); err != nil && bg.Err() == nil {
				bgErr <- err
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // the consumer is streaming before the writers start
	walStart, err := h.walPosition(ctx)
	if err != nil {
		return res, err
	}
	srvStart, err := serverCPU(h.postmaster)
	if err != nil {
		return res, err
	}
	selfStart := selfCPU()
	res.committed, res.elapsed, err = e.write(ctx, v)
	res.behind = res.committed - e.received.Load()
	if v.consume == nil {
		res.behind = 0
	}
	// Decoding and cleanup of what was written count too: wait for the
	// consumer to catch up, and for one more maintenance pass.
	for caught := time.Now().Add(10 * time.Second); v.consume != nil && e.received.Load() < res.committed && time.Now().Before(caught); {
		time.Sleep(10 * time.Millisecond)
	}
	if v.maintain != nil {
		time.Sleep(250 * time.Millisecond)
	}
	walEnd, werr := h.walPosition(ctx)
	srvEnd, serr := serverCPU(h.postmaster)
	res.walBytes, res.serverCPU, res.selfCPU = walEnd-walStart, srvEnd-srvStart, selfCPU()-selfStart
	if err == nil {
		err = errors.Join(werr, serr)
	}
	stopBG()
	wg.Wait()
	select {
	case err = <-bgErr:
		return res, err
	default:
	}
	if err != nil {
		return res, err
	}
	if v.migrate || v.ddl != "" {
		if err := e.pool.QueryRow(ctx, `SELECT COALESCE(sum(autovacuum_count), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = $1 AND relname LIKE 'outbox_events%'`, e.schema).Scan(&res.vacuums); err != nil {
			return res, err
		}
	}
	after, err := e.tableBytes(ctx, v)
	res.tableBytes = after - empty
	if after < 0 {
		res.tableBytes = -1
	}
	return res, err
}

// tableBytes is the size of the outbox table with its indexes and
// partitions, -1 without a table.
func (e *env) tableBytes(ctx context.Context, v variant) (int64, error) {
	if !v.migrate && v.ddl == "" {
		return -1, nil
	}
	var n int64
	err := e.pool.QueryRow(ctx, `SELECT COALESCE((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('outbox_events'::regclass)),
	                                             pg_total_relation_size('outbox_events'))::bigint`).Scan(&n)
	return n, err
}

// walPosition is the server's current WAL position, in bytes.
func (h *harness) walPosition(ctx context.Context) (int64, error) {
	var n int64
	err := h.admin.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n)
	return n, err
}

// write runs the writers for the window: each transaction inserts an order
// and does the variant's outbox write.
func (e *env) write(ctx context.Context, v variant) (int64, time.Duration, error) {
	var (
		next, ok atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(e.h.window)
	for range e.h.writers {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := next.Add(1)
				err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
					id := strconv.FormatInt(i, 10)
					if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total, created_at) VALUES ($1, $2, 4999, now())`, id, "c"+strconv.FormatInt(i%1000, 10)); err != nil {
						return err
					}
					if v.event == nil {
						return nil
					}
					return v.event(ctx, tx, id)
				})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, err
	}
	return ok.Load(), time.Since(start), nil
}

// payload is the event every variant writes, about the size of the
// benchmarks' order.created.
func payload(orderID string) []byte {
	b, _ := json.Marshal(map[string]any{"order_id": orderID, "customer_id": "c42", "total": 4999, "currency": "EUR",
		"lines": []map[string]any{{"sku": "sku-1", "qty": 2, "price": 1999}, {"sku": "sku-2", "qty": 1, "price": 1001}}})
	return b
}

const ordersSQL = `
CREATE TABLE orders (
    id          VARCHAR(100) PRIMARY KEY,
    customer_id VARCHAR(100) NOT NULL,
    total       BIGINT       NOT NULL,
    created_at  TIMESTAMPTZ  NOT NULL
)`
