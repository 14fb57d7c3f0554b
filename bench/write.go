package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/outbox"
)

// writers runs CreateOrder from several goroutines. Each order's id (and so
// its event's aggregate_id) is its index, which the recorder checks off.
type writers struct {
	n      int
	create func(ctx context.Context, o Order) error
	after  func() // called after each successful commit (the wake-up)
}

type writeStats struct {
	Committed, Failed int64
	Elapsed           time.Duration
	CommitNs          []int64   // by index: when CreateOrder returned (latency runs)
	CallMS            []float64 // CreateOrder durations, sorted (latency runs)
	FirstErr          error
}

func order(i int64) Order {
	return Order{ID: strconv.FormatInt(i, 10), CustomerID: "c" + strconv.FormatInt(i%1000, 10), Total: 4999}
}

// fullSpeed runs the writers back to back for window.
func (w writers) fullSpeed(ctx context.Context, window time.Duration) writeStats {
	var (
		next, ok, failed atomic.Int64
		firstErr         atomic.Value
		wg               sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(window)
	for range w.n {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := w.create(ctx, order(next.Add(1)-1)); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ok.Add(1)
				if w.after != nil {
					w.after()
				}
			}
		})
	}
	wg.Wait()
	st := writeStats{Committed: ok.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}
	if e, _ := firstErr.Load().(error); e != nil {
		st.FirstErr = e
	}
	return st
}

// paced runs the writers at rate events/s (open loop: event k is due at
// start + k/rate, whatever happened to k-1) for window, recording when each
// CreateOrder returned.
func (w writers) paced(ctx context.Context, rate int, window time.Duration) writeStats {
	total := int64(float64(rate) * window.Seconds())
	st := writeStats{CommitNs: make([]int64, total)}
	var (
		next, ok, failed atomic.Int64
		firstErr         atomic.Value
		wg               sync.WaitGroup
		mu               sync.Mutex
	)
	start := time.Now()
	for range w.n {
		wg.Go(func() {
			var calls []float64
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= total {
					break
				}
				if d := time.Until(start.Add(time.Duration(float64(k) / float64(rate) * float64(time.Second)))); d > 0 {
					time.Sleep(d)
				}
				t := time.Now()
				if err := w.create(ctx, order(k)); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				now := time.Now()
				st.CommitNs[k] = now.UnixNano()
				calls = append(calls, float64(now.Sub(t).Microseconds())/1000)
				ok.Add(1)
				if w.after != nil {
					w.after()
				}
			}
			mu.Lock()
			st.CallMS = append(st.CallMS, calls...)
			mu.Unlock()
		})
	}
	wg.Wait()
	st.Committed, st.Failed, st.Elapsed = ok.Load(), failed.Load(), time.Since(start)
	sort.Float64s(st.CallMS)
	if e, _ := firstErr.Load().(error); e != nil {
		st.FirstErr = e
	}
	return st
}

// writePhase is one write-cost phase: a design, its writers, and how its
// relay runs.
type writePhase struct {
	label  string
	design string
	relay  string        // "" none; "child": a relay process; "inproc": in the writers' process, on a pool of its own
	wakeup string        // "notify": Listen + one Notifier shared by the writers; "wake": Relay.Wake (inproc); "": polling only (the baseline: its trigger)
	app    bool          // writers through pgxpool (pgx.BeginFunc + Writer.Write), as an application would; else database/sql, the baseline's CreateOrder
	async  bool          // relay sessions with synchronous_commit=off
	del    bool          // RelayConfig.DeleteOnPublish
	delay  time.Duration // RelayConfig.BatchDelay
	rescan time.Duration // RelayConfig.RescanInterval
	notify time.Duration // NotifierConfig.Interval
}

// writerDB is the writers' pool on schema, and a database/sql handle on it.
func (h *harness) writerDB(ctx context.Context, schema string) (*pgxpool.Pool, *sql.DB, error) {
	pool, err := newPool(ctx, h.opt.DatabaseURL, schema, h.prefix+"_writers", int32(max(h.opt.Writers, h.opt.LatWriters)+4))
	if err != nil {
		return nil, nil, err
	}
	return pool, stdlib.OpenDBFromPool(pool), nil
}

// appCreateOrder is CreateOrder as an application on pgx writes it: the
// order row and the event in one pgx transaction.
func appCreateOrder(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, o Order) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total, created_at) VALUES ($1, $2, $3, NOW())`,
			o.ID, o.CustomerID, o.Total); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		payload, err := json.Marshal(map[string]any{"order_id": o.ID, "customer_id": o.CustomerID, "total": o.Total})
		if err != nil {
			return err
		}
		_, err = w.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: o.ID, EventType: "order.created", Payload: payload})
		return err
	})
}

// writePhases are the write figure's phases, in sets: each relay phase runs
// between two no-relay phases of its set. pgoutbox's writers are an
// application's (pgx, Writer.Write); the relay runs in their process on a
// pool of its own, or as a process of its own (the outbox relay daemon).
func (h *harness) writePhases() []writeSet {
	const app = "pgoutbox: "
	ours := writeSet{base: writePhase{label: app + "no relay", design: designOurs, app: true}, phases: []writePhase{
		{label: app + "relay polling (no wake-up)", design: designOurs, relay: "inproc", app: true},
		{label: app + "relay with Listen, writers call a shared Notifier", design: designOurs, relay: "inproc", wakeup: "notify", app: true},
		{label: app + "writers call Relay.Wake()", design: designOurs, relay: "inproc", wakeup: "wake", app: true},
		{label: app + "relay polling, DeleteOnPublish", design: designOurs, relay: "inproc", app: true, del: true},
		{label: app + "relay process with Listen, writers call a shared Notifier", design: designOurs, relay: "child", wakeup: "notify", app: true},
	}}
	sql := writeSet{base: writePhase{label: "pgoutbox, database/sql writers: no relay", design: designOurs}}
	if h.opt.Extra {
		ours.phases = append(ours.phases,
			writePhase{label: app + "relay process, polling only (no wake-up)", design: designOurs, relay: "child", app: true},
			writePhase{label: app + "relay process with Listen + Notifier, relay synchronous_commit=off", design: designOurs, relay: "child", wakeup: "notify", app: true, async: true},
			writePhase{label: app + "relay with Listen + Notifier (Interval 20ms)", design: designOurs, relay: "inproc", wakeup: "notify", app: true, notify: 20 * time.Millisecond},
			writePhase{label: app + "relay with Listen + Notifier, DeleteOnPublish", design: designOurs, relay: "inproc", wakeup: "notify", app: true, del: true},
			writePhase{label: app + "relay with Listen + Notifier, BatchDelay off (a claim per wake-up)", design: designOurs, relay: "inproc", wakeup: "notify", app: true, delay: -1},
			writePhase{label: app + "relay with Listen + Notifier, BatchDelay 25ms", design: designOurs, relay: "inproc", wakeup: "notify", app: true, delay: 25 * time.Millisecond},
			// The claim floor trails the claims by RescanInterval/4: every
			// claim steps over the entries of the rows claimed since.
			writePhase{label: app + "writers call Relay.Wake(), RescanInterval 100ms", design: designOurs, relay: "inproc", wakeup: "wake", app: true, rescan: 100 * time.Millisecond},
		)
		sql.phases = []writePhase{
			{label: "pgoutbox, database/sql writers: relay process with Listen + Notifier", design: designOurs, relay: "child", wakeup: "notify"},
		}
	}
	sets := []writeSet{ours, sql,
		{base: writePhase{label: "baseline: no trigger, no relay", design: designBaseline}, phases: []writePhase{
			{label: "baseline: NOTIFY trigger + its LISTEN relay", design: designBaseline, relay: "child"},
		}},
	}
	if h.opt.Filter != "" {
		for i := range sets {
			var kept []writePhase
			for _, p := range sets[i].phases {
				if strings.Contains(p.label, h.opt.Filter) {
					kept = append(kept, p)
				}
			}
			sets[i].phases = kept
		}
	}
	return sets
}

type writeSet struct {
	base   writePhase
	phases []writePhase
}

// writeRun measures every write-cost phase once. The machine is shared and
// its load drifts within seconds, so each relay phase is sandwiched between
// two no-relay phases of its set, and its ratio is taken against their
// mean: B R1 B R2 B ...
func (h *harness) writeRun(ctx context.Context, r *results) error {
	for _, set := range h.writePhases() {
		if len(set.phases) == 0 {
			continue
		}
		before, err := h.writePhase(ctx, r, set.base)
		if err != nil {
			return fmt.Errorf("%s: %w", set.base.label, err)
		}
		bf := r.write(set.base.label)
		for _, p := range set.phases {
			rate, err := h.writePhase(ctx, r, p)
			if err != nil {
				return fmt.Errorf("%s: %w", p.label, err)
			}
			after, err := h.writePhase(ctx, r, set.base)
			if err != nil {
				return fmt.Errorf("%s: %w", set.base.label, err)
			}
			f := r.write(p.label)
			f.Ratio = append(f.Ratio, rate/((before+after)/2))
			bf.Ratio = append(bf.Ratio, 1)
			before = after
		}
	}
	return nil
}

func (h *harness) writePhase(ctx context.Context, r *results, p writePhase) (float64, error) {
	var s string
	var err error
	if p.design == designOurs {
		s, err = h.setupOurs(ctx, "write")
	} else {
		s, err = h.setupBaseline(ctx, "write", p.relay != "")
	}
	if err != nil {
		return 0, err
	}
	defer h.release(ctx, s)
	h.checkpoint(ctx) // each phase starts with no checkpoint pending (full-page writes after one double the WAL)
	pool, db, err := h.writerDB(ctx, s)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	defer db.Close()

	w := writers{n: h.opt.Writers}
	switch {
	case p.design == designOurs:
		ow, err := outbox.NewWriter(outbox.WriterConfig{Schema: s})
		if err != nil {
			return 0, err
		}
		if p.app {
			w.create = func(ctx context.Context, o Order) error { return appCreateOrder(ctx, pool, ow, o) }
		} else {
			w.create = func(ctx context.Context, o Order) error { return pgoutboxCreateOrder(ctx, db, ow, o) }
		}
	default:
		w.create = func(ctx context.Context, o Order) error { return baselineCreateOrder(ctx, db, o) }
	}

	f := r.write(p.label)
	sessions := map[string]string{"writers": h.prefix + "_writers"}
	var fin func(committed int64) (relayResult, error)
	switch p.relay {
	case "child":
		spec := h.spec(p.design, s, pubMemory)
		spec.Listen = p.wakeup == "notify"
		spec.AsyncCommit = p.async
		spec.Delete = p.del
		spec.BatchDelay = p.delay
		spec.Rescan = p.rescan
		sessions["relay"] = spec.AppName
		child, err := spawnRelay(ctx, spec)
		if err != nil {
			return 0, err
		}
		if err := child.start(); err != nil {
			child.kill()
			return 0, err
		}
		if p.wakeup == "notify" {
			n, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Schema: s, Interval: p.notify})
			if err != nil {
				child.kill()
				return 0, err
			}
			defer n.Close()
			w.after = n.Notify
		}
		fin = child.finish
	case "inproc":
		rec := newRecorder(1<<16, false)
		spec := h.spec(p.design, s, pubMemory)
		spec.Listen = p.wakeup == "notify"
		spec.Delete = p.del
		spec.BatchDelay = p.delay
		spec.Rescan = p.rescan
		sessions["relay"] = spec.AppName
		rpool, err := newPool(ctx, h.opt.DatabaseURL, s, spec.AppName, 0, spec.params()...)
		if err != nil {
			return 0, err
		}
		defer rpool.Close()
		rr, err := startRelay(ctx, spec, rpool, &recordingPublisher{rec: rec})
		if err != nil {
			return 0, err
		}
		if spec.Listen {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := waitListening(wctx, rpool, spec.AppName)
			cancel()
			if err != nil {
				_ = rr.stop()
				return 0, err
			}
		}
		switch p.wakeup {
		case "wake":
			w.after = rr.wake
		case "notify":
			n, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Schema: s, Interval: p.notify})
			if err != nil {
				_ = rr.stop()
				return 0, err
			}
			defer n.Close()
			w.after = n.Notify
		}
		fin = func(n int64) (relayResult, error) {
			rec.setTarget(n)
			wctx, cancel := context.WithTimeout(ctx, h.opt.Timeout)
			doneAt := rec.wait(wctx)
			cancel()
			err := rr.stop()
			res := relayResult{Delivery: rec.delivery(n)}
			if doneAt.IsZero() && err == nil {
				err = fmt.Errorf("only %d of %d events confirmed", res.Delivery.Distinct, n)
			}
			return res, err
		}
	}

	h.logf("write: %s, %d writers for %s", p.label, w.n, h.opt.WriteWindow)
	probe := h.probeStart(ctx, s, p.label, sessions)
	var st writeStats
	if h.opt.WriteRate > 0 {
		st = w.paced(ctx, h.opt.WriteRate, h.opt.WriteWindow)
	} else {
		st = w.fullSpeed(ctx, h.opt.WriteWindow)
	}
	pr := probe.stop(ctx, st.Committed)
	rate := float64(st.Committed) / st.Elapsed.Seconds()
	f.Rate = append(f.Rate, rate)
	f.addProbe(pr)
	if st.Failed > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%d CreateOrder calls failed, first: %v", st.Failed, st.FirstErr))
	}
	msg := ""
	if fin != nil {
		f.Check = true
		// Every committed order wrote exactly one event: the orders are the
		// expected set (the outbox rows too, unless the relay deletes them
		// as it publishes).
		orders, err := h.rowCount(ctx, s, "orders")
		if err != nil {
			return 0, err
		}
		rows, err := h.rowCount(ctx, s, "outbox_events")
		if err != nil {
			return 0, err
		}
		res, err := fin(orders)
		ok := err == nil && res.Delivery.OK() && (p.del || orders == rows)
		if err != nil {
			f.Notes = append(f.Notes, err.Error())
		}
		f.OK = append(f.OK, ok)
		f.Dups = append(f.Dups, res.Delivery.Dups())
		msg = fmt.Sprintf(", delivered %d/%d, dups %d", res.Delivery.Distinct, orders, res.Delivery.Dups())
	}
	h.logf("write: %s: %.0f orders/s; per order %.0f B WAL, %.1f records, %.3f FPI, PostgreSQL CPU µs writers %.0f relay %.0f; %.0f claims/s, %.1f orders/claim%s; waits %v",
		p.label, rate, pr.WALBytes, pr.WALRecs, pr.FPI, pr.BackendCPU["writers"], pr.BackendCPU["relay"], pr.ClaimsPS, pr.PerClaim, msg, pr.Waits)
	return rate, nil
}
