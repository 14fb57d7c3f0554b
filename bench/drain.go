package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
)

// drainFigure is one line of the drain table, one value per run.
type drainFigure struct {
	Label   string
	Backlog int
	Rate    []float64 // events/s
	Ratio   []float64 // / raw SQL floor of the same run
	RSSMB   []float64
	CPUus   []float64 // relay process CPU per event, µs
	Dups    []int64
	OK      []bool
	Notes   []string

	// The WAL figure's drains: the backlog's events per transaction, its
	// transactions/s, and the ratio to the server decode floor of the
	// same shape, same run (Floor: this row is that floor; its CPUus is
	// the decoding backend's).
	PerTx      int       `json:",omitempty"`
	Floor      bool      `json:",omitempty"`
	TxRate     []float64 `json:",omitempty"`
	FloorRatio []float64 `json:",omitempty"`

	// --wal-profile: where the relay's time went. Phases: its CPU profile
	// by phase, µs per event; SQL: its statements (first run); RelayPGus
	// and WalsenderUS: its PostgreSQL sessions' and its walsender's CPU,
	// µs per event; Profile: the profile file.
	Phases      map[string][]float64 `json:",omitempty"`
	SQL         []sqlStat            `json:",omitempty"`
	RelayPGus   []float64            `json:",omitempty"`
	WalsenderUS []float64            `json:",omitempty"`
	Profile     string               `json:",omitempty"`
}

// rawSQLFloor is the cost of the database work alone: conc connections each
// claim-and-delete 1000 rows per statement, reading every payload, until the
// table is empty. Each row read is checked off, as a relay's would be.
const rawSQLFloor = `DELETE FROM outbox_events WHERE id IN (
    SELECT id FROM outbox_events
    WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
    ORDER BY seq LIMIT 1000
    FOR UPDATE SKIP LOCKED)
RETURNING id, aggregate_type, aggregate_id, event_type, payload`

// rawMarkFloor is the same for a relay that keeps processed rows (pgoutbox's
// default): claim-and-mark 1000 rows per statement. It writes a new row
// version and two index entries per row where the DELETE writes none.
const rawMarkFloor = `UPDATE outbox_events SET processed_at = now() WHERE id IN (
    SELECT id FROM outbox_events
    WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
    ORDER BY seq LIMIT 1000
    FOR UPDATE SKIP LOCKED)
RETURNING id, aggregate_type, aggregate_id, event_type, payload`

func (h *harness) rawFloor(ctx context.Context, schema string, n, conc int, query string) (float64, delivery, error) {
	rec := newRecorder(n, false)
	q := "SET LOCAL search_path = " + pgx.Identifier{schema}.Sanitize()
	start := time.Now()
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, conc)
	for range conc {
		go func() {
			errs <- func() error {
				conn, err := h.pool.Acquire(gctx)
				if err != nil {
					return err
				}
				defer conn.Release()
				for {
					got := 0
					err := pgx.BeginFunc(gctx, conn, func(tx pgx.Tx) error {
						if _, err := tx.Exec(gctx, q); err != nil {
							return err
						}
						rows, err := tx.Query(gctx, query)
						if err != nil {
							return err
						}
						var (
							id                  [16]byte
							aggType, aggID, typ string
							payload             []byte
						)
						rec.mu.Lock()
						defer rec.mu.Unlock()
						for rows.Next() {
							if err := rows.Scan(&id, &aggType, &aggID, &typ, &payload); err != nil {
								return err
							}
							rec.recordLocked(aggID, time.Now())
							got++
						}
						return rows.Err()
					})
					if err != nil {
						return err
					}
					if got == 0 {
						return nil
					}
				}
			}()
		}()
	}
	var firstErr error
	for range conc {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	if firstErr != nil {
		return 0, delivery{}, firstErr
	}
	elapsed := time.Since(start)
	return float64(n) / elapsed.Seconds(), rec.delivery(int64(n)), nil
}

// drainOnce runs one child relay over a pre-filled backlog of n events and
// checks delivery against the table and, for a broker, against the count of
// messages the broker holds (see openDestination).
func (h *harness) drainOnce(ctx context.Context, spec relaySpec, schema string, n int, fillAfterStart func() error) (relayResult, float64, error) {
	dest, err := h.openDestination(ctx, &spec)
	if err != nil {
		return relayResult{}, 0, err
	}
	if dest != nil {
		defer h.releaseDestination(ctx, dest)
	}
	spec.Expect = n
	if h.opt.DrainProfile != "" {
		if err := os.MkdirAll(h.opt.DrainProfile, 0o755); err != nil {
			return relayResult{}, 0, err
		}
		spec.Profile = filepath.Join(h.opt.DrainProfile, spec.AppName+".pprof")
	}
	child, err := spawnRelay(ctx, spec)
	if err != nil {
		return relayResult{}, 0, err
	}
	if err := child.start(); err != nil {
		child.kill()
		return relayResult{}, 0, err
	}
	var ws *waitSampler
	if h.opt.SampleWaits {
		ws = h.sampleWaits(ctx, spec.AppName)
	}
	var t0 time.Time
	if fillAfterStart != nil {
		if err := fillAfterStart(); err != nil {
			child.kill()
			return relayResult{}, 0, err
		}
		t0 = time.Now()
	}
	res, err := child.finish(0)
	if ws != nil {
		h.lastWaits = ws.stop()
	}
	if err != nil {
		return res, 0, err
	}
	elapsed := res.Elapsed
	if !t0.IsZero() {
		elapsed = time.Unix(0, res.DoneAt).Sub(t0)
	}
	if pending, err := h.pendingAfter(ctx, spec.Design, schema); err != nil {
		return res, 0, err
	} else if pending != 0 {
		return res, 0, fmt.Errorf("%d rows still unprocessed after the relay confirmed every event", pending)
	}
	if dest != nil {
		msgs, err := waitStored(ctx, dest, int64(n))
		if err != nil {
			return res, 0, fmt.Errorf("counting the messages of %s: %w", dest.what, err)
		}
		if msgs < int64(n) {
			return res, 0, fmt.Errorf("%s holds %d messages, want at least %d", dest.what, msgs, n)
		}
	}
	return res, float64(n) / elapsed.Seconds(), nil
}

// drainRun measures every drain figure once.
func (h *harness) drainRun(ctx context.Context, r *results) error {
	n := h.opt.Events
	na := min(n, h.opt.BaselineCap)

	// Raw SQL floors: DELETE (the target's), then UPDATE (what marking costs).
	var floor float64
	for _, fl := range []struct{ label, query string }{
		{fmt.Sprintf("raw SQL floor (DELETE … RETURNING, batches of 1000, %d connections)", h.opt.Workers), rawSQLFloor},
		{fmt.Sprintf("raw SQL floor, marking instead (UPDATE … SET processed_at … RETURNING, batches of 1000, %d connections)", h.opt.Workers), rawMarkFloor},
	} {
		s, err := h.setupOurs(ctx, "raw")
		if err != nil {
			return err
		}
		h.logf("drain: filling %d events (%s)", n, fl.label)
		if err := h.fillOurs(ctx, s, 0, n); err != nil {
			return err
		}
		rate, del, err := h.rawFloor(ctx, s, n, h.opt.Workers, fl.query)
		if err != nil {
			return err
		}
		h.release(ctx, s)
		if floor == 0 {
			floor = rate
		}
		f := r.drain(fl.label, n)
		f.add(rate, rate/floor, relayResult{Delivery: del}, del.OK(), "")
		h.logf("drain: %s: %.0f ev/s (delivered %d/%d, dups %d)", fl.label, rate, del.Distinct, n, del.Dups())
	}
	var (
		s   string
		err error
	)

	type variant struct {
		label, design, pub string
		n                  int
		afterDrain         string // growth row label for the claim after this drain
		batch, workers     int
		del, async         bool
	}
	vs := []variant{
		{label: fmt.Sprintf("pgoutbox → in-memory (defaults: batch %d, %d workers)", outbox.DefaultBatchSize, outbox.DefaultWorkers), design: designOurs, pub: pubMemory, n: n, afterDrain: "pgoutbox: just drained " + count(n) + ", before VACUUM"},
		{label: "pgoutbox → NATS JetStream (defaults)", design: designOurs, pub: pubNATS, n: n},
		{label: "baseline → in-memory (processBatch, batch 100, LISTEN + trigger)", design: designBaseline, pub: pubMemory, n: na, afterDrain: "baseline: just drained " + count(na) + ", before VACUUM"},
		{label: "baseline → NATS JetStream", design: designBaseline, pub: pubNATS, n: na},
	}
	if h.opt.Extra {
		vs = append(vs,
			variant{label: "pgoutbox → in-memory (BatchSize 100, the baseline's)", design: designOurs, pub: pubMemory, n: n, batch: 100},
			variant{label: "pgoutbox → in-memory (DeleteOnPublish)", design: designOurs, pub: pubMemory, n: n, del: true},
			variant{label: "pgoutbox → in-memory (Workers 4)", design: designOurs, pub: pubMemory, n: n, workers: 4},
			variant{label: "pgoutbox → in-memory (DeleteOnPublish, Workers 4)", design: designOurs, pub: pubMemory, n: n, del: true, workers: 4},
			variant{label: "pgoutbox → NATS JetStream (BatchSize 100, the baseline's)", design: designOurs, pub: pubNATS, n: n, batch: 100},
			variant{label: "pgoutbox → NATS JetStream (Workers 4)", design: designOurs, pub: pubNATS, n: n, workers: 4})
	}
	if h.opt.Watermill {
		vs = append(vs, variant{label: watermillName + " → counting publisher", design: designWatermill, pub: pubMemory, n: n})
	}
	if n > 100_000 {
		vs = append(vs, variant{label: "pgoutbox → in-memory (defaults), RSS at a smaller backlog", design: designOurs, pub: pubMemory, n: 100_000})
	}
	for _, v := range vs {
		if !matchesFilter(v.label, h.opt.Filter) {
			continue
		}
		spec := h.spec(v.design, "", v.pub)
		spec.BatchSize, spec.Workers, spec.Delete, spec.AsyncCommit = v.batch, v.workers, v.del, v.async
		var fillAfter func() error
		if v.design == designWatermill {
			s, err = h.setupWatermill(ctx, "drain")
			if err == nil {
				h.logf("drain: filling %d events", v.n)
				err = h.fillWatermill(ctx, s, 0, v.n, v.n) // one transaction, as fillOurs
			}
			if err == nil {
				spec, err = h.watermillSpec(ctx, s)
			}
		} else if v.design == designOurs {
			s, err = h.setupOurs(ctx, "drain")
			if err == nil {
				h.logf("drain: filling %d events", v.n)
				err = h.fillOurs(ctx, s, 0, v.n)
			}
		} else {
			// The baseline's relay drains on notifications, so its backlog is
			// written (with the trigger) once it listens; the clock starts
			// when that INSERT commits.
			s, err = h.setupBaseline(ctx, "drain", true)
			fillAfter = func() error { return h.fillBaseline(ctx, s, 0, v.n) }
		}
		if err != nil {
			return err
		}
		spec.Schema = s
		h.logf("drain: %s, %d events", v.label, v.n)
		res, rate, err := h.drainOnce(ctx, spec, s, v.n, fillAfter)
		f := r.drain(v.label, v.n)
		note := ""
		if err != nil {
			note = err.Error()
			h.logf("drain: %s: FAILED: %v", v.label, err)
		}
		f.add(rate, rate/floor, res, err == nil && res.Delivery.OK(), note)
		if v.design == designOurs && (v.pub == pubMemory || v.pub == pubNATS) && v.n == h.opt.BrokerEvents &&
			v.batch == 0 && v.workers == 0 && !v.del && !v.async {
			h.sameRun[v.pub] = sameRun{rate: rate, res: res, err: err}
		}
		if h.opt.SampleWaits && r.waits[v.label] == nil && h.lastWaits != nil {
			if r.waits == nil {
				r.waits = map[string][]string{}
			}
			r.waits[v.label] = h.lastWaits
			r.waitOrder = append(r.waitOrder, v.label)
		}
		h.logf("drain: %s: %.0f ev/s (%.2f of raw), peak RSS %.1f MB, delivered %d/%d, dups %d",
			v.label, rate, rate/floor, float64(res.MaxRSSKB)/1024, res.Delivery.Distinct, v.n, res.Delivery.Dups())
		if v.afterDrain != "" && h.opt.want("growth") && err == nil {
			if err := h.claimAfterDrain(ctx, r, v.design, s, v.n, v.afterDrain); err != nil {
				return err
			}
		}
		h.release(ctx, s)
	}
	return nil
}

// claimAfterDrain times the claim right after a drain, when the pending
// index still holds an entry for every row just processed (no VACUUM has
// run: autovacuum is off here, and in production it runs at most once a
// minute per table), then again after VACUUM.
func (h *harness) claimAfterDrain(ctx context.Context, r *results, design, schema string, drained int, label string) error {
	var err error
	if design == designOurs {
		err = h.fillOurs(ctx, schema, drained, 1000)
	} else {
		_, err = h.exec(ctx, schema, "ALTER TABLE outbox_events DISABLE TRIGGER outbox_insert_notify")
		if err == nil {
			err = h.fillBaseline(ctx, schema, drained, 1000)
		}
	}
	if err != nil {
		return err
	}
	st, err := h.claimLatency(ctx, design, schema, h.opt.ClaimSamples)
	if err != nil {
		return err
	}
	g := r.growth(label)
	g.addClaim(st)
	h.logf("growth: %s: claim p50 %.2f ms p99 %.2f ms", label, st.P50, st.P99)
	if len(g.ClaimP50) == 1 && design == designOurs {
		plan, err := h.explainClaim(ctx, design, schema)
		if err != nil {
			return err
		}
		r.explains = append(r.explains, fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS) of pgoutbox's claim right after its relay drained %s events (1000 new pending, no VACUUM since):\n\n```\n%s\n```",
			count(drained), plan))
	}
	if design == designOurs {
		// What the relay's ordinary claims pay: they start past the rows
		// it processed (its floor).
		var floor int64
		if err := h.pool.QueryRow(ctx, "SELECT COALESCE(max(seq), 0) FROM "+pgx.Identifier{schema, "outbox_events"}.Sanitize()+
			" WHERE processed_at IS NOT NULL").Scan(&floor); err != nil {
			return err
		}
		st, err := h.claimLatencyAt(ctx, design, schema, h.opt.ClaimSamples, floor)
		if err != nil {
			return err
		}
		at := label + ", from the relay's floor (its ordinary claims; the row above is its rescan)"
		r.growth(at).addClaim(st)
		h.logf("growth: %s: claim p50 %.2f ms p99 %.2f ms", at, st.P50, st.P99)
	}
	if err := h.vacuum(ctx, schema); err != nil {
		return err
	}
	st, err = h.claimLatency(ctx, design, schema, h.opt.ClaimSamples)
	if err != nil {
		return err
	}
	after := design + ": just drained " + count(drained) + ", after VACUUM"
	r.growth(after).addClaim(st)
	h.logf("growth: %s: claim p50 %.2f ms p99 %.2f ms", after, st.P50, st.P99)
	return nil
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
