package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pgoutbox/outbox"
)

// latencyRun measures commit-to-confirmation latency once per variant.
func (h *harness) latencyRun(ctx context.Context, r *results) error {
	vs := []latVariant{
		{label: "pgoutbox → NATS JetStream (relay process, LISTEN + Notifier)", design: designOurs, pub: pubNATS},
		{label: "baseline → NATS JetStream (trigger + LISTEN)", design: designBaseline, pub: pubNATS},
	}
	if h.opt.Watermill {
		// The peer publishes to a counting publisher in its process:
		// beside it, pgoutbox to the in-memory one.
		vs = append(vs, latVariant{label: watermillName + " → counting publisher", design: designWatermill, pub: pubMemory})
		if !h.opt.LatMemory {
			vs = append(vs, latVariant{label: "pgoutbox → in-memory (relay process, LISTEN + Notifier)", design: designOurs, pub: pubMemory})
		}
	}
	if h.opt.LatMemory {
		vs = append(vs,
			latVariant{label: "pgoutbox → in-memory (relay process, LISTEN + Notifier)", design: designOurs, pub: pubMemory},
			latVariant{label: "baseline → in-memory (trigger + LISTEN)", design: designBaseline, pub: pubMemory})
	}
	for _, v := range vs {
		v.rate, v.perTx, v.window = h.opt.Rate, 1, h.opt.LatWindow
		if err := h.latencyOnce(ctx, r.lat(v.label), v); err != nil {
			return fmt.Errorf("%s: %w", v.label, err)
		}
	}
	return nil
}

// latVariant is one latency measurement: a relay, its publisher, and the
// writers' load.
type latVariant struct {
	label, design, pub string
	source             string // pgoutbox: RelayConfig.Source; the table source runs with LISTEN + a Notifier, the WAL source needs no wake-up
	rate               int    // events/s
	perTx              int    // events per writer transaction
	window             time.Duration
	delay              time.Duration // RelayConfig.BatchDelay (0: the default)
}

// latWarmup is how long the writers run before their events are timed.
const latWarmup = time.Second

func (h *harness) latencyOnce(ctx context.Context, f *latFigure, v latVariant) error {
	wal := v.source == string(outbox.SourceWAL)
	var s string
	var err error
	switch {
	case v.design == designWatermill:
		s, err = h.setupWatermill(ctx, "latency")
	case wal:
		s, err = h.setupWAL(ctx, "latency")
	case v.design == designOurs:
		s, err = h.setupOurs(ctx, "latency")
	default:
		s, err = h.setupBaseline(ctx, "latency", true)
	}
	if s != "" {
		defer h.release(ctx, s)
	}
	if err != nil {
		return err
	}
	pool, db, err := h.writerDB(ctx, s)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer db.Close()

	spec := h.spec(v.design, s, v.pub)
	if v.design == designWatermill {
		if spec, err = h.watermillSpec(ctx, s); err != nil {
			return err
		}
	}
	spec.Listen = !wal && v.design != designWatermill
	spec.Source = v.source
	spec.BatchDelay = v.delay
	spec.Timed = true
	if v.pub == pubNATS {
		stream, err := h.newStream(ctx)
		if err != nil {
			return err
		}
		defer h.releaseStream(ctx, stream)
		spec.Subject = stream
	}
	child, err := spawnRelay(ctx, spec)
	if err != nil {
		return err
	}
	if err := child.start(); err != nil {
		child.kill()
		return err
	}
	if wal {
		// Timed from a relay that has caught up with the WAL written
		// before it started (the schema's setup): the catch-up is a
		// start's cost, not the stream's latency.
		var lsn string
		if err := h.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
			child.kill()
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := h.waitConfirmed(wctx, s, lsn)
		cancel()
		if err != nil {
			child.kill()
			return err
		}
	}
	w := writers{n: h.opt.LatWriters, perTx: v.perTx}
	if v.design == designOurs {
		ow, err := outbox.NewWriter(outbox.WriterConfig{Schema: s})
		if err != nil {
			child.kill()
			return err
		}
		w.create = func(ctx context.Context, o Order) error { return pgoutboxCreateOrder(ctx, db, ow, o) }
		w.createN = func(ctx context.Context, os []Order) error { return pgoutboxCreateOrders(ctx, db, ow, os) }
		if !wal {
			n, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Schema: s})
			if err != nil {
				child.kill()
				return err
			}
			defer n.Close()
			w.after = n.Notify
		}
	} else if v.design == designWatermill {
		if v.perTx > 1 {
			child.kill()
			return fmt.Errorf("the watermill writers write one order per transaction")
		}
		w.create = func(ctx context.Context, o Order) error { return appWatermillOrder(ctx, pool, o) }
	} else {
		if v.perTx > 1 {
			child.kill()
			return fmt.Errorf("the baseline writes one order per transaction")
		}
		w.create = func(ctx context.Context, o Order) error { return baselineCreateOrder(ctx, db, o) }
	}
	h.logf("latency: %s, %d ev/s (%d per transaction) for %s", v.label, v.rate, max(v.perTx, 1), v.window)
	st := w.paced(ctx, v.rate, v.window)
	// Every committed order wrote exactly one event (the WAL source deletes
	// the rows it published, so count the orders).
	orders, err := h.rowCount(ctx, s, "orders")
	if err != nil {
		child.kill()
		return err
	}
	res, err := child.finish(orders)
	if err != nil {
		f.Notes = append(f.Notes, err.Error())
	}
	if st.Failed > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%d events' transactions failed, first: %v", st.Failed, st.FirstErr))
	}
	// The first second warms up: the writers' pool opens its connections
	// and their backends load their caches, which on a small machine
	// takes the CPU from everything else for a few hundred milliseconds.
	// Its events are checked for delivery, not timed.
	warm := st.Start.Add(latWarmup).UnixNano()
	var lat, handed []float64
	delivered := int64(0)
	for k, c := range st.CommitNs {
		if c == 0 || k >= len(res.Times) || res.Times[k] == 0 {
			continue
		}
		delivered++
		if c >= warm || v.window <= 2*latWarmup {
			lat = append(lat, float64(res.Times[k]-c)/1e6)
			if k < len(res.Handed) && res.Handed[k] != 0 {
				handed = append(handed, float64(res.Handed[k]-c)/1e6)
			}
		}
	}
	sort.Float64s(lat)
	sort.Float64s(handed)
	ok := err == nil && res.Delivery.OK() && delivered == st.Committed && orders == st.Committed
	f.OK = append(f.OK, ok)
	f.Dups = append(f.Dups, res.Delivery.Dups())
	f.Achieved = append(f.Achieved, float64(st.Committed)/st.Elapsed.Seconds())
	if len(lat) > 0 {
		f.P50 = append(f.P50, percentile(lat, 50))
		f.P99 = append(f.P99, percentile(lat, 99))
		f.Max = append(f.Max, lat[len(lat)-1])
	}
	if len(handed) > 0 {
		f.HandedP50 = append(f.HandedP50, percentile(handed, 50))
		f.HandedP99 = append(f.HandedP99, percentile(handed, 99))
	}
	f.CommitP50 = append(f.CommitP50, percentile(st.CallMS, 50))
	f.CommitP99 = append(f.CommitP99, percentile(st.CallMS, 99))
	if res.MaxRSSKB > 0 {
		f.RSSMB = append(f.RSSMB, float64(res.MaxRSSKB)/1024)
	}
	h.logf("latency: %s: writers %.0f ev/s, p50 %.2f ms, p99 %.2f ms (to the publisher: %.2f / %.2f ms), max %.1f ms, delivered %d/%d, dups %d, relay peak RSS %.0f MB",
		v.label, f.Achieved[len(f.Achieved)-1], percentile(lat, 50), percentile(lat, 99), percentile(handed, 50), percentile(handed, 99), percentile(lat, 100),
		res.Delivery.Distinct, orders, res.Delivery.Dups(), float64(res.MaxRSSKB)/1024)
	return nil
}

// pgoutboxCreateOrders is pgoutboxCreateOrder for several orders in one
// transaction: one multi-row INSERT of the orders, one Writer.WriteSQL of
// their events.
func pgoutboxCreateOrders(ctx context.Context, db *sql.DB, w *outbox.Writer, os []Order) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin tx: %w", err)
	}
	defer tx.Rollback()
	var q strings.Builder
	q.WriteString(`INSERT INTO orders (id, customer_id, total, created_at) VALUES `)
	args := make([]any, 0, 3*len(os))
	evs := make([]outbox.Event, len(os))
	for i, o := range os {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "($%d, $%d, $%d, NOW())", 3*i+1, 3*i+2, 3*i+3)
		args = append(args, o.ID, o.CustomerID, o.Total)
		payload, err := json.Marshal(map[string]any{"order_id": o.ID, "customer_id": o.CustomerID, "total": o.Total})
		if err != nil {
			return err
		}
		evs[i] = outbox.Event{AggregateType: "order", AggregateID: o.ID, EventType: "order.created", Payload: payload}
	}
	if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	if _, err := w.WriteSQL(ctx, tx, evs...); err != nil {
		return err
	}
	return tx.Commit()
}
