package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
)

// The WAL source's figures (--only wal, walsize): the relay streaming
// committed events from a logical replication slot, measured beside the
// table source in the same run. Its write cost is a phase of the write
// figure.

// fillTx adds n pending events with indexes [from, from+n) in transactions
// of perTx events, as writers would commit them, server-side: one DO block
// that commits after every INSERT. The session runs synchronous_commit=off:
// the fill is not what is measured, and 10,000 commits need no flush each.
// With analyze it then runs ANALYZE and a CHECKPOINT, as fillOurs does.
func (h *harness) fillTx(ctx context.Context, schema string, from, n, perTx int, analyze bool) error {
	if n < 1 {
		return nil
	}
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET synchronous_commit")
	if _, err := conn.Exec(ctx, fillTxSQL(pgx.Identifier{schema, "outbox_events"}.Sanitize(), from, n, perTx)); err != nil {
		return fmt.Errorf("fill %d events in transactions of %d: %w", n, perTx, err)
	}
	if !analyze {
		return nil
	}
	if _, err := h.exec(ctx, schema, "ANALYZE outbox_events"); err != nil {
		return err
	}
	h.checkpoint(ctx)
	return nil
}

// fillTxSQL is fillTx's DO block (a DO block takes no parameters: the
// numbers are formatted in, the table is a sanitized identifier).
func fillTxSQL(table string, from, n, perTx int) string {
	last := from + n - 1
	return fmt.Sprintf(`DO $fill$
DECLARE b bigint;
BEGIN
  FOR b IN 0..%d LOOP
    INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, payload, created_at)
    SELECT %s, %s
    FROM generate_series(%d + b * %d, least(%d + (b + 1) * %d - 1, %d)) i;
    COMMIT;
  END LOOP;
END
$fill$`, (n+perTx-1)/perTx-1, table, v7ID, eventValuesSQL, from, perTx, from, perTx, last)
}

// walRun measures the WAL figure once: for every --wal-tx shape, the drain
// of a backlog already in the WAL next to the table source's drain of the
// same backlog, the server's own decode rate of it (the floor) and
// Watermill's forwarder draining it; then the latency of both sources at
// every --wal-rates rate.
func (h *harness) walRun(ctx context.Context, r *results) error {
	if h.walErr != nil {
		return nil // said once, in the output
	}
	n := h.opt.Events
	for _, perTx := range h.opt.WALTxs {
		var floor float64
		for _, pub := range []string{pubMemory, pubNATS} {
			var tableRate float64
			srcs := []string{string(outbox.SourceTable), string(outbox.SourceWAL)}
			if pub == pubMemory && h.opt.Watermill {
				srcs = append(srcs, designWatermill)
			}
			for _, src := range srcs {
				label := walDrainLabel(src, pub, perTx)
				if !matchesFilter(label, h.opt.Filter) {
					continue
				}
				rate, fl, err := h.walDrainOnce(ctx, r, label, src, pub, n, perTx, tableRate, floor)
				if err != nil {
					return fmt.Errorf("%s: %w", label, err)
				}
				if src == string(outbox.SourceTable) {
					tableRate = rate
				}
				if fl > 0 {
					floor = fl
				}
			}
		}
	}
	for _, rate := range h.opt.WALRates {
		perTx := txSize(rate, h.opt.WALTxRate)
		for _, src := range []string{string(outbox.SourceTable), string(outbox.SourceWAL)} {
			v := latVariant{label: walLatLabel(src, rate, perTx), design: designOurs, pub: pubNATS, source: src,
				rate: rate, perTx: perTx, window: h.opt.WALLatWindow}
			if !matchesFilter(v.label, h.opt.Filter) {
				continue
			}
			if err := h.latencyOnce(ctx, r.walLat(v.label), v); err != nil {
				return fmt.Errorf("%s: %w", v.label, err)
			}
		}
		if !h.opt.Extra {
			continue
		}
		// Without pacing each wake-up claims (reads): the latency floor of
		// each source, and what the claims then cost the writers.
		for _, src := range []string{string(outbox.SourceTable), string(outbox.SourceWAL)} {
			v := latVariant{label: walLatLabel(src, rate, perTx) + ", BatchDelay off", design: designOurs, pub: pubNATS, source: src,
				rate: rate, perTx: perTx, window: h.opt.WALLatWindow, delay: -1}
			if !matchesFilter(v.label, h.opt.Filter) {
				continue
			}
			if err := h.latencyOnce(ctx, r.walLat(v.label), v); err != nil {
				return fmt.Errorf("%s: %w", v.label, err)
			}
		}
	}
	return nil
}

// txSize is how many events each writer transaction carries so that rate
// events/s take at most txRate transactions/s.
func txSize(rate, txRate int) int {
	if txRate < 1 || rate <= txRate {
		return 1
	}
	return (rate + txRate - 1) / txRate
}

func sourceName(src string) string {
	if src == string(outbox.SourceWAL) {
		return "WAL source"
	}
	return "table source (polling, defaults)"
}

// walDrainLabel names a WAL figure drain by its relay (a source, or the
// watermill peer), publisher and backlog shape.
func walDrainLabel(src, pub string, perTx int) string {
	name := sourceName(src)
	if src == designWatermill {
		name = watermillName
	}
	return name + " → " + brokerLabelShort(pub) + ", " + perTxName(perTx)
}

func perTxName(perTx int) string {
	if perTx == 1 {
		return "1 event per transaction"
	}
	return fmt.Sprintf("%d events per transaction", perTx)
}

// walFloorLabel names the server decode floor of a shape.
func walFloorLabel(perTx int) string {
	return "server decode floor: pg_logical_slot_peek_binary_changes of a copy of the slot, " + perTxName(perTx)
}

// walStreamFloorLabel names the pg_recvlogical row of a shape.
func walStreamFloorLabel(perTx int) string {
	return "pg_recvlogical: a walsender streaming a copy of the slot to PostgreSQL's own client, " + perTxName(perTx)
}

func walLatLabel(src string, rate, perTx int) string {
	name := "WAL source"
	if src != string(outbox.SourceWAL) {
		name = "table source (LISTEN + Notifier)"
	}
	return fmt.Sprintf("%s → NATS JetStream, %s ev/s (%d per transaction)", name, count(rate), perTx)
}

func brokerLabelShort(pub string) string {
	if pub == pubNATS {
		return "NATS JetStream"
	}
	return "in-memory"
}

// walDrainOnce fills n events in transactions of perTx (for the WAL
// source, after creating the slot: the backlog is in the WAL, and no relay
// reads it yet), then drains them with a relay process of the source (or
// the watermill peer). For the WAL source to in-memory it first times the
// server's own decoding of that backlog on a copy of the slot made before
// the fill, and returns that floor's events/s; each WAL row's FloorRatio is
// to the floor of its shape.
func (h *harness) walDrainOnce(ctx context.Context, r *results, label, src, pub string, n, perTx int, tableRate, floor float64) (rate, measuredFloor float64, err error) {
	var s string
	wal := src == string(outbox.SourceWAL)
	switch {
	case wal:
		s, err = h.setupWAL(ctx, "waldrain")
	case src == designWatermill:
		s, err = h.setupWatermill(ctx, "waldrain")
	default:
		s, err = h.setupOurs(ctx, "waldrain")
	}
	if s != "" {
		defer h.release(ctx, s)
	}
	if err != nil {
		return 0, 0, err
	}
	floorSlot, streamSlot := "", ""
	if wal && pub == pubMemory {
		if floorSlot, err = h.copySlot(ctx, s); err != nil {
			return 0, 0, err
		}
		defer h.dropFloor(ctx, floorSlot)
		if streamSlot, err = h.copySlot(ctx, s); err != nil {
			return 0, 0, err
		}
		defer h.dropFloor(ctx, streamSlot)
	}
	h.logf("wal: filling %d events, %d per transaction (%s)", n, perTx, label)
	if src == designWatermill {
		err = h.fillWatermill(ctx, s, 0, n, perTx)
	} else {
		err = h.fillTx(ctx, s, 0, n, perTx, true)
	}
	if err != nil {
		return 0, 0, err
	}
	if floorSlot != "" {
		fl, err := h.decodeFloor(ctx, s, floorSlot, n)
		if err != nil {
			return 0, 0, fmt.Errorf("server decode floor: %w", err)
		}
		h.dropFloor(ctx, floorSlot)
		ff := r.walDrain(walFloorLabel(perTx), n)
		ff.PerTx, ff.Floor = perTx, true
		ff.Rate = append(ff.Rate, fl.rate)
		ff.TxRate = append(ff.TxRate, fl.rate/float64(perTx))
		ff.FloorRatio = append(ff.FloorRatio, 1)
		ff.CPUus = append(ff.CPUus, fl.cpuUS)
		ff.OK = append(ff.OK, fl.inserts == int64(n))
		if fl.inserts != int64(n) {
			ff.Notes = append(ff.Notes, fmt.Sprintf("decoded %d inserts, want %d", fl.inserts, n))
		}
		h.logf("wal: %s: %.0f ev/s, %.0f tx/s, %d messages in %s, backend CPU %.1f µs/event",
			walFloorLabel(perTx), fl.rate, fl.rate/float64(perTx), fl.messages, fl.elapsed.Round(time.Millisecond), fl.cpuUS)
		floor, measuredFloor = fl.rate, fl.rate

		// A reference row: when pg_recvlogical cannot run (not installed,
		// a URL libpq does not read), the row says why and the drains go on.
		sf, err := h.streamFloor(ctx, s, streamSlot, n)
		h.dropFloor(ctx, streamSlot)
		sr := r.walDrain(walStreamFloorLabel(perTx), n)
		sr.PerTx = perTx
		if err != nil {
			sr.Notes = append(sr.Notes, err.Error())
			h.logf("wal: %s: %v", walStreamFloorLabel(perTx), err)
		} else {
			sr.Rate = append(sr.Rate, sf.rate)
			sr.TxRate = append(sr.TxRate, sf.rate/float64(perTx))
			sr.FloorRatio = append(sr.FloorRatio, sf.rate/floor)
			sr.CPUus = append(sr.CPUus, sf.cpuUS)
			h.logf("wal: %s: %.0f ev/s in %s, walsender CPU %.1f µs/event",
				walStreamFloorLabel(perTx), sf.rate, sf.elapsed.Round(time.Millisecond), sf.cpuUS)
		}
	}
	var spec relaySpec
	if src == designWatermill {
		if spec, err = h.watermillSpec(ctx, s); err != nil {
			return 0, 0, err
		}
	} else {
		spec = h.spec(designOurs, s, pub)
		spec.Source = src
	}
	if wal {
		spec.Walsender = h.walsenderApp(s)
	}
	if h.opt.WALProfile != "" {
		if err := os.MkdirAll(h.opt.WALProfile, 0o755); err != nil {
			return 0, 0, err
		}
		spec.TraceSQL = true
		spec.Profile = filepath.Join(h.opt.WALProfile, profileName(label)+".pprof")
	}
	h.logf("wal: %s, %d events", label, n)
	res, rate, err := h.drainOnce(ctx, spec, s, n, nil)
	f := r.walDrain(label, n)
	f.PerTx = perTx
	note := ""
	if err != nil {
		note = err.Error()
		h.logf("wal: %s: FAILED: %v", label, err)
	}
	ratio := 1.0
	if src != string(outbox.SourceTable) {
		ratio = 0
		if tableRate > 0 {
			ratio = rate / tableRate
		}
	}
	f.add(rate, ratio, res, err == nil && res.Delivery.OK(), note)
	f.TxRate = append(f.TxRate, rate/float64(perTx))
	if floor > 0 {
		f.FloorRatio = append(f.FloorRatio, rate/floor)
	}
	if h.opt.WALProfile != "" && err == nil {
		h.addBreakdown(ctx, f, spec, res, n)
	}
	h.logf("wal: %s: %.0f ev/s (%.2f of the table source), peak RSS %.1f MB, delivered %d/%d, dups %d",
		label, rate, ratio, float64(res.MaxRSSKB)/1024, res.Delivery.Distinct, n, res.Delivery.Dups())
	return rate, measuredFloor, nil
}

// profileName is a label as a file name.
func profileName(label string) string {
	return strings.Trim(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(label, "-"), "-")
}

// walSizeFigure is the WAL source's table size and relay RSS while it
// streams, measured once per invocation.
type walSizeFigure struct {
	// Partitioned: the table was partitioned (MigrateConfig.Partitioned),
	// the relay rotating its partitions every RotateEvents, and no chunk
	// was followed by a VACUUM.
	Partitioned  bool `json:",omitempty"`
	RotateEvents int  `json:",omitempty"`
	Events       int
	PerTx        int
	EmptyTable   int64 // bytes: heap, TOAST, free space and visibility maps
	EmptyIndexes int64
	Points       []walSizePoint
	PeakRSSKB    int64
	OK           bool
	Dups         int64
	Notes        []string
	// Partitioned: the table once the relay, idle, had rotated and dropped
	// every partition of delivered events, and how long that took after
	// the last chunk.
	SettledTable, SettledIndexes int64         `json:",omitempty"`
	SettledAfter                 time.Duration `json:",omitempty"`
}

// walSizePoint is the state after a chunk of events was written and the
// relay caught up with it (published them, deleted their rows and
// confirmed the slot past them).
type walSizePoint struct {
	Delivered int64
	Vacuum    bool  // a VACUUM ran after this chunk (autovacuum's stand-in)
	Table     int64 // bytes, before that VACUUM
	Indexes   int64 // bytes, before that VACUUM
	VacTable  int64 `json:",omitempty"` // after it
	VacIndex  int64 `json:",omitempty"`
	// Dead rows the VACUUM could not remove (another session's snapshot
	// still saw them), and the oldest snapshot's holder at that moment.
	DeadLeft int64   `json:",omitempty"`
	HeldBy   string  `json:",omitempty"`
	RSSKB    int64   // the relay process's resident set
	Rate     float64 // events/s of the chunk: fill start to the relay caught up
	// Partitions attached when the sizes were read (partitioned table).
	Partitions int `json:",omitempty"`
}

// deadLeft is how many dead rows the VACUUM just run left in schema's table
// (VACUUM reports them to the statistics as it ends), and which session
// held the oldest snapshot (a shared server's other work can keep VACUUM
// from removing anything).
func (h *harness) deadLeft(ctx context.Context, schema string) (int64, string) {
	var n int64
	_ = h.pool.QueryRow(ctx, `SELECT COALESCE(n_dead_tup, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'outbox_events'`, schema).Scan(&n)
	var who string
	_ = h.pool.QueryRow(ctx, `SELECT COALESCE(NULLIF(application_name, ''), backend_type) || ' (pid ' || pid || ', ' || state || ' for ' ||
		COALESCE(round(extract(epoch FROM now() - xact_start))::text, '?') || ' s, xmin age ' || age(backend_xmin) || ')'
		FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() ORDER BY age(backend_xmin) DESC LIMIT 1`).Scan(&who)
	return n, who
}

// tableSizes is the outbox table's size without its indexes (heap, TOAST,
// free space and visibility maps), and its indexes', summed over its
// partitions if it has any.
func (h *harness) tableSizes(ctx context.Context, schema string) (table, indexes int64, err error) {
	table, indexes, _, err = h.partSizes(ctx, schema)
	return table, indexes, err
}

// partSizes is tableSizes with the number of partitions (1 for a table
// that has none).
func (h *harness) partSizes(ctx context.Context, schema string) (table, indexes int64, parts int, err error) {
	t := pgx.Identifier{schema, "outbox_events"}.Sanitize()
	err = h.pool.QueryRow(ctx, `WITH leaves AS (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf),
t AS (SELECT relid FROM leaves UNION ALL SELECT $1::regclass WHERE NOT EXISTS (SELECT 1 FROM leaves))
SELECT sum(pg_table_size(relid))::bigint, sum(pg_indexes_size(relid))::bigint, count(*)::int FROM t`, t).Scan(&table, &indexes, &parts)
	return table, indexes, parts, err
}

// waitConfirmed blocks until schema's slot is confirmed at lsn or past it:
// the WAL source confirms a transaction only after deleting its rows.
func (h *harness) waitConfirmed(ctx context.Context, schema, lsn string) error {
	slot := h.slotName(schema)
	for {
		var done bool
		err := h.pool.QueryRow(ctx, `SELECT COALESCE(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`,
			slot, lsn).Scan(&done)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("slot %s is gone", slot)
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slot %s not confirmed at %s: %w", slot, lsn, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitCatalogXmin waits (up to 15 s) until schema's slot's
// catalog_xmin has passed every transaction so far, as autovacuum would
// find it in production: PostgreSQL 15 recycles the B-tree pages a VACUUM
// emptied only past every logical slot's catalog_xmin, which moves at the
// server's running-transactions records (every 15 s, and at each
// CHECKPOINT, run here to get one now). A VACUUM run before it moved, as
// fast chunks would, frees no index page: a benchmark artefact.
func (h *harness) waitCatalogXmin(ctx context.Context, schema string) (time.Duration, error) {
	start := time.Now()
	var xid string
	if err := h.pool.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
		return 0, err
	}
	slot := h.slotName(schema)
	// Past 15 s (the interval of the running-transactions records) another
	// session's transaction holds it back: the VACUUM runs anyway, noted.
	for time.Since(start) < 15*time.Second {
		if _, err := h.pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return 0, err
		}
		var passed bool
		err := h.pool.QueryRow(ctx, `SELECT COALESCE(age(catalog_xmin) < age(($2::xid8)::xid), false) FROM pg_replication_slots WHERE slot_name = $1`,
			slot, xid).Scan(&passed)
		if err != nil {
			return 0, err
		}
		if passed {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return 0, fmt.Errorf("slot %s: catalog_xmin did not pass transaction %s within 15 s", slot, xid)
}

// walSizeRun streams --wal-size-events events through one WAL relay
// process (in-memory publisher), written in --wal-size-points chunks, and
// records the table's and indexes' size and the relay's RSS after each.
// autovacuum is off on our servers; in production it would vacuum the table
// once 10,000 rows are dead (migration 4's setting), at most once per
// autovacuum_naptime. So the first half of the chunks is followed by a
// VACUUM (autovacuum's stand-in, at least as often as it would run at these
// rates, and as it would, after the slot's catalog_xmin moved), the second
// half by none, which is what the table does with no vacuum at all.
//
// partitioned runs it on a partitioned table instead, with no VACUUM at
// all: the relay rotates a partition every half chunk and drops those it
// has delivered. After the last chunk it waits until the idle relay has
// rotated and dropped the last of them too.
func (h *harness) walSizeRun(ctx context.Context, r *results, partitioned bool) error {
	if h.walErr != nil {
		return nil
	}
	total, points := h.opt.WALSizeEvents, h.opt.WALSizePoints
	chunk := total / points
	f := &walSizeFigure{Events: chunk * points, PerTx: h.opt.WALTx, Partitioned: partitioned}
	what := "walsize"
	if partitioned {
		f.RotateEvents = max(chunk/2, 1)
		r.walPartSize, what = f, "walparts"
	} else {
		r.walSize = f
	}
	s, err := h.setupWALTable(ctx, what, partitioned)
	if s != "" {
		defer h.release(ctx, s)
	}
	if err != nil {
		return err
	}
	if f.EmptyTable, f.EmptyIndexes, err = h.tableSizes(ctx, s); err != nil {
		return err
	}
	spec := h.spec(designOurs, s, pubMemory)
	spec.Source = string(outbox.SourceWAL)
	if partitioned {
		spec.RotateEvents, spec.RotateEvery = f.RotateEvents, walSizeRotateEvery
	}
	child, err := spawnRelay(ctx, spec)
	if err != nil {
		return err
	}
	if err := child.start(); err != nil {
		child.kill()
		return err
	}
	pid := child.cmd.Process.Pid
	h.logf("walsize: empty table %s, indexes %s; streaming %d events in %d chunks", mb(f.EmptyTable), mb(f.EmptyIndexes), f.Events, points)
	var delivered int64
	for i := range points {
		vac := i < (points+1)/2 && !partitioned
		start := time.Now()
		if err := h.fillTx(ctx, s, int(delivered), chunk, h.opt.WALTx, false); err != nil {
			child.kill()
			return err
		}
		var lsn string
		if err := h.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			child.kill()
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, h.opt.Timeout)
		err := h.waitConfirmed(wctx, s, lsn)
		cancel()
		if err != nil {
			child.kill()
			return err
		}
		delivered += int64(chunk)
		p := walSizePoint{Delivered: delivered, Vacuum: vac, RSSKB: procRSSKB(pid), Rate: float64(chunk) / time.Since(start).Seconds()}
		if p.Table, p.Indexes, p.Partitions, err = h.partSizes(ctx, s); err != nil {
			child.kill()
			return err
		}
		if vac {
			if waited, err := h.waitCatalogXmin(ctx, s); err != nil {
				f.Notes = append(f.Notes, fmt.Sprintf("after %s: %v; VACUUM ran anyway", count(int(delivered)), err))
			} else {
				h.logf("walsize: the slot's catalog_xmin passed the chunk's deletions after %s", waited.Round(time.Millisecond))
			}
			if _, err := h.pool.Exec(ctx, "VACUUM "+pgx.Identifier{s, "outbox_events"}.Sanitize()); err != nil {
				child.kill()
				return err
			}
			if p.VacTable, p.VacIndex, err = h.tableSizes(ctx, s); err != nil {
				child.kill()
				return err
			}
			p.DeadLeft, p.HeldBy = h.deadLeft(ctx, s)
		}
		f.Points = append(f.Points, p)
		vacuumed := "no VACUUM"
		if vac {
			vacuumed = fmt.Sprintf("after VACUUM %s, %s; %d dead rows left", mb(p.VacTable), mb(p.VacIndex), p.DeadLeft)
			if p.DeadLeft > 0 {
				vacuumed += ", oldest snapshot: " + p.HeldBy
			}
		}
		if partitioned {
			vacuumed = fmt.Sprintf("no VACUUM, %d partitions", p.Partitions)
		}
		h.logf("%s: %d delivered: table %s, indexes %s (%s), relay RSS %.0f MB, %.0f ev/s",
			what, delivered, mb(p.Table), mb(p.Indexes), vacuumed, float64(p.RSSKB)/1024, p.Rate)
	}
	if partitioned {
		if err := h.walSizeSettle(ctx, s, f); err != nil {
			child.kill()
			return err
		}
	}
	res, err := child.finish(delivered)
	if err != nil {
		f.Notes = append(f.Notes, err.Error())
	}
	f.PeakRSSKB, f.Dups = res.MaxRSSKB, res.Delivery.Dups()
	left, cerr := h.rowCount(ctx, s, "outbox_events")
	if cerr != nil {
		return cerr
	}
	if left != 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%d rows left in the table after every event was confirmed", left))
	}
	f.OK = err == nil && res.Delivery.OK() && left == 0
	return nil
}

// walSizeRotateEvery is the partitioned size figure's RotateInterval: the
// idle relay rotates the last partition that took events this long after
// the last chunk.
const walSizeRotateEvery = 10 * time.Second

// walSizeSettle waits until the relay has dropped every partition holding
// delivered events (one partition left, never written to), up to a
// minute past walSizeRotateEvery, and records the table then.
func (h *harness) walSizeSettle(ctx context.Context, s string, f *walSizeFigure) error {
	start := time.Now()
	for {
		table, idx, parts, err := h.partSizes(ctx, s)
		if err != nil {
			return err
		}
		f.SettledTable, f.SettledIndexes, f.SettledAfter = table, idx, time.Since(start).Round(time.Second)
		if parts == 1 && table == f.EmptyTable {
			h.logf("walparts: settled after %s: table %s, indexes %s", f.SettledAfter, mb(table), mb(idx))
			return nil
		}
		if time.Since(start) > walSizeRotateEvery+time.Minute {
			f.Notes = append(f.Notes, fmt.Sprintf("not settled %s after the last chunk: %d partitions, table %s", f.SettledAfter, parts, mb(table)))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// procRSSKB is a local process's resident set in kB (0 if unknown).
func procRSSKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func mb(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d kB", b/1024)
}

// printWAL prints the WAL source's figures (its write cost is in figure 2).
func (r *results) printWAL(w io.Writer, opt options) {
	if r.walSkipped != "" {
		fmt.Fprintf(w, "### WAL source\n\nNot measured: %s\n\n", r.walSkipped)
		return
	}
	if len(r.walDrains) > 0 {
		fmt.Fprintf(w, "### 6. WAL source: drain of a backlog already in the WAL (committed while the slot existed and no relay ran), beside the table source and Watermill's forwarder draining the same backlog, and the server's own decoding of it\n\n")
		fmt.Fprintf(w, "Each shape's floor is the server decoding that backlog itself: `pg_logical_slot_peek_binary_changes` with pgoutput and the relay's publication, on a copy of the relay's slot made before the fill, timed before the relay runs (its CPU column is that backend's). The WAL rows' last ratio is to it. The pg_recvlogical row is a walsender streaming a second such copy to PostgreSQL's own client, which reads as fast as it can and discards what it receives: what streaming costs the server with the simplest reader (its CPU column is the walsender's).\n\n")
		fmt.Fprintf(w, "| relay → publisher, backlog shape | backlog | events/s | transactions/s | / table source (same publisher, shape, run) | / server decode floor (same shape, run) | relay peak RSS | relay CPU µs/event | delivery verified |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.walDrains {
			ratio, floor := fmtRatio(f.Ratio), fmtRatio(f.FloorRatio)
			if f.Floor {
				ratio, floor = "", "1"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f.Label, count(f.Backlog), fmtRate(f.Rate), fmtRate(f.TxRate),
				ratio, floor, fmtMB(f.RSSMB), fmtUS(f.CPUus), fmtOK(f.OK, f.Dups))
		}
		notes(w, r.walDrains, func(f *drainFigure) (string, []string) { return f.Label, f.Notes })
		fmt.Fprintln(w)
		printBreakdown(w, r.walDrains, opt.WALProfile)
	}
	if len(r.walLats) > 0 {
		fmt.Fprintf(w, "### 7. WAL source: latency, %d writers paced for %s, commit return → NATS JetStream PubAck\n\n", opt.LatWriters, opt.WALLatWindow)
		fmt.Fprintf(w, "| relay → publisher, load | writers sustained | p50 ms | p99 ms | max ms | writers' transaction p50 / p99 ms | relay peak RSS | delivery verified |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.walLats {
			fmt.Fprintf(w, "| %s | %s ev/s | %s | %s | %s | %s / %s | %s | %s |\n", f.Label, fmtRate(f.Achieved), fmtMS(f.P50), fmtMS(f.P99), fmtMS(f.Max),
				fmtMS(f.CommitP50), fmtMS(f.CommitP99), fmtMB(f.RSSMB), fmtOK(f.OK, f.Dups))
		}
		notes(w, r.walLats, func(f *latFigure) (string, []string) { return f.Label, f.Notes })
		fmt.Fprintln(w)
	}
	if f := r.walSize; f != nil {
		printWALSize(w, "8", f)
	}
	if f := r.walPartSize; f != nil {
		printWALSize(w, "9", f)
	}
}

// printWALSize prints one size figure.
func printWALSize(w io.Writer, num string, f *walSizeFigure) {
	if f.Partitioned {
		fmt.Fprintf(w, "### %s. WAL source, partitioned table: table size and relay RSS while streaming %s events (%d per transaction), no cleanup run, no VACUUM\n\n", num, count(f.Events), f.PerTx)
		fmt.Fprintf(w, "The table is partitioned (`outbox migrate --source wal --partitioned`); the relay moves new events to a new partition every %s events (`RotateEvents`), or %s after the last one if the current partition took any (`RotateInterval`), and drops each partition once the slot is past it and its events are delivered. Sizes are summed over the partitions, right after the relay caught up with each chunk. Nothing vacuums the table.\n\n", count(f.RotateEvents), walSizeRotateEvery)
		fmt.Fprintf(w, "| events delivered | partitions | table | indexes | relay RSS | chunk events/s |\n|---:|---:|---:|---:|---:|---:|\n")
		fmt.Fprintf(w, "| 0 (empty) | 1 | %s | %s | | |\n", mb(f.EmptyTable), mb(f.EmptyIndexes))
		for _, p := range f.Points {
			fmt.Fprintf(w, "| %s | %d | %s | %s | %.0f MB | %s |\n", count(int(p.Delivered)), p.Partitions, mb(p.Table), mb(p.Indexes), float64(p.RSSKB)/1024, humanRate(p.Rate))
		}
		fmt.Fprintf(w, "| settled, %s after the last chunk | 1 | %s | %s | | |\n", f.SettledAfter, mb(f.SettledTable), mb(f.SettledIndexes))
	} else {
		fmt.Fprintf(w, "### %s. WAL source: table size and relay RSS while streaming %s events (%d per transaction), no cleanup run\n\n", num, count(f.Events), f.PerTx)
		fmt.Fprintf(w, "After each chunk the relay caught up (published, deleted the rows, confirmed the slot). autovacuum is off on this server: the first half of the chunks is followed by a VACUUM (autovacuum's stand-in, run once the slot's catalog_xmin passed the chunk), the second half by none.\n\n")
		fmt.Fprintf(w, "| events delivered | table | indexes | VACUUM, then table / indexes | dead rows VACUUM could not remove | relay RSS | chunk events/s |\n|---:|---:|---:|---:|---:|---:|---:|\n")
		fmt.Fprintf(w, "| 0 (empty) | %s | %s | | | | |\n", mb(f.EmptyTable), mb(f.EmptyIndexes))
		for _, p := range f.Points {
			vac, dead := "none", ""
			if p.Vacuum {
				vac = mb(p.VacTable) + " / " + mb(p.VacIndex)
				dead = fmt.Sprint(p.DeadLeft)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.0f MB | %s |\n", count(int(p.Delivered)), mb(p.Table), mb(p.Indexes), vac, dead, float64(p.RSSKB)/1024, humanRate(p.Rate))
		}
		for _, p := range f.Points {
			if p.DeadLeft > 0 {
				fmt.Fprintf(w, "\n- after %s: the oldest snapshot was %s", count(int(p.Delivered)), p.HeldBy)
			}
		}
	}
	fmt.Fprintf(w, "\nRelay peak RSS over the whole stream: %.0f MB; delivery: %s\n", float64(f.PeakRSSKB)/1024, fmtOK([]bool{f.OK}, []int64{f.Dups}))
	for _, n := range f.Notes {
		fmt.Fprintf(w, "\n- %s", n)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
}

// walSizeVerdict compares the table (with its indexes) after the last
// VACUUM of the stream with the empty table, the target, and says
// how the size moved across the chunks with and without VACUUM.
func walSizeVerdict(f *walSizeFigure) (string, bool) {
	empty := f.EmptyTable + f.EmptyIndexes
	if f.Partitioned {
		settled := f.SettledTable + f.SettledIndexes
		var peak int64
		for _, p := range f.Points {
			peak = max(peak, p.Table+p.Indexes)
		}
		return fmt.Sprintf("%s once the relay dropped the last partition of delivered events, %s after the last chunk (empty: %s, ratio %.2f); at most %s while streaming",
			mb(settled), f.SettledAfter, mb(empty), float64(settled)/float64(max(empty, 1)), mb(peak)), settled > 0 && float64(settled) <= 1.1*float64(empty)
	}
	var vac, noVac []walSizePoint
	for _, p := range f.Points {
		if p.Vacuum {
			vac = append(vac, p)
		} else {
			noVac = append(noVac, p)
		}
	}
	var parts []string
	met := false
	if len(vac) > 0 {
		first, last := vac[0], vac[len(vac)-1]
		after := last.VacTable + last.VacIndex
		met = float64(after) <= 1.1*float64(empty)
		parts = append(parts, fmt.Sprintf("%s after the VACUUM at %s delivered (empty: %s, ratio %.1f); before each VACUUM %s at %s, %s at %s",
			mb(after), count(int(last.Delivered)), mb(empty), float64(after)/float64(max(empty, 1)),
			mb(first.Table+first.Indexes), count(int(first.Delivered)), mb(last.Table+last.Indexes), count(int(last.Delivered))))
	}
	if len(noVac) > 0 {
		first, last := noVac[0], noVac[len(noVac)-1]
		parts = append(parts, fmt.Sprintf("no VACUUM: %s at %s, %s at %s", mb(first.Table+first.Indexes), count(int(first.Delivered)),
			mb(last.Table+last.Indexes), count(int(last.Delivered))))
	}
	return strings.Join(parts, "; "), met
}

// walRSSVerdict: the relay's RSS stays under 100 MB and does not grow with
// the events streamed (the last sample within 20% + 5 MB of the first).
func walRSSVerdict(f *walSizeFigure) (string, bool) {
	first, last := f.Points[0].RSSKB, f.Points[len(f.Points)-1].RSSKB
	peak := float64(f.PeakRSSKB) / 1024
	got := fmt.Sprintf("%.0f MB after %s, %.0f MB after %s; peak %.0f MB", float64(first)/1024, count(int(f.Points[0].Delivered)),
		float64(last)/1024, count(int(f.Points[len(f.Points)-1].Delivered)), peak)
	return got, peak <= 100 && first > 0 && float64(last) <= 1.2*float64(first)+5*1024
}
