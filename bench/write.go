package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
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

	// paced only: perTx > 1 commits that many orders per transaction
	// through createN (the latency figure's higher rates).
	perTx   int
	createN func(ctx context.Context, os []Order) error
}

type writeStats struct {
	Committed, Failed int64
	Elapsed           time.Duration
	Start             time.Time
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

// paced runs the writers at rate events/s (open loop: transaction k is due
// at start + k*perTx/rate, whatever happened to k-1) for window, recording
// when each event's transaction returned. Committed counts events.
func (w writers) paced(ctx context.Context, rate int, window time.Duration) writeStats {
	perTx := max(w.perTx, 1)
	txs := int64(float64(rate)*window.Seconds()) / int64(perTx)
	st := writeStats{CommitNs: make([]int64, txs*int64(perTx))}
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
			batch := make([]Order, perTx)
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= txs {
					break
				}
				if d := time.Until(start.Add(time.Duration(float64(k*int64(perTx)) / float64(rate) * float64(time.Second)))); d > 0 {
					time.Sleep(d)
				}
				t := time.Now()
				var err error
				if perTx == 1 {
					err = w.create(ctx, order(k))
				} else {
					for j := range batch {
						batch[j] = order(k*int64(perTx) + int64(j))
					}
					err = w.createN(ctx, batch)
				}
				if err != nil {
					failed.Add(int64(perTx))
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				now := time.Now()
				for j := range int64(perTx) {
					st.CommitNs[k*int64(perTx)+j] = now.UnixNano()
				}
				calls = append(calls, float64(now.Sub(t).Microseconds())/1000)
				ok.Add(int64(perTx))
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
	st.Start = start
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
	label    string
	design   string
	relay    string        // "" none; "child": a relay process; "inproc": in the writers' process, on a pool of its own; "burn": no relay, a busy loop on the relay's CPUs (--pin-relay)
	wakeup   string        // "notify": Listen + one Notifier shared by the writers; "wake": Relay.Wake (inproc); "": polling only (the baseline: its trigger)
	app      bool          // writers through pgxpool (pgx.BeginFunc + Writer.Write), as an application would; else database/sql, the baseline's CreateOrder
	business bool          // writers insert the order row only: no outbox at all (the physical limit of every design)
	source   string        // RelayConfig.Source of the relay ("" the table; "wal" needs the publication and slot, which the phase creates)
	lean     bool          // the table set up for the WAL source (outbox migrate --source wal) without its slot: a WAL phase's no-relay writers
	queued   bool          // app writers queue the event on the order's batch (Writer.Queue): one statement round trip, not two
	async    bool          // relay sessions with synchronous_commit=off
	del      bool          // RelayConfig.DeleteOnPublish
	delay    time.Duration // RelayConfig.BatchDelay
	rescan   time.Duration // RelayConfig.RescanInterval
	notify   time.Duration // NotifierConfig.Interval
	writers  int           // writers (0: --writers)
	trace    bool          // a relay process counts its statements (sqlTracer), kept in the figure's SQL
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

// appQueueOrder is appCreateOrder with the event queued on the batch that
// carries the order row (Writer.Queue): one round trip for both.
func appQueueOrder(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, o Order) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO orders (id, customer_id, total, created_at) VALUES ($1, $2, $3, NOW())`, o.ID, o.CustomerID, o.Total)
		payload, err := json.Marshal(map[string]any{"order_id": o.ID, "customer_id": o.CustomerID, "total": o.Total})
		if err != nil {
			return err
		}
		if _, err := w.Queue(ctx, b, outbox.Event{AggregateType: "order", AggregateID: o.ID, EventType: "order.created", Payload: payload}); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

// appCreateBusiness is appCreateOrder without the outbox: the order row
// alone, in a pgx transaction.
func appCreateBusiness(ctx context.Context, pool *pgxpool.Pool, o Order) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total, created_at) VALUES ($1, $2, $3, NOW())`,
			o.ID, o.CustomerID, o.Total)
		return err
	})
}

// sqlCreateBusiness is the order row alone through database/sql, the
// baseline's CreateOrder without its outbox INSERT.
func sqlCreateBusiness(ctx context.Context, db *sql.DB, o Order) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, customer_id, total, created_at) VALUES ($1, $2, $3, NOW())`,
		o.ID, o.CustomerID, o.Total); err != nil {
		return err
	}
	return tx.Commit()
}

const (
	walWriteLabel = "pgoutbox: WAL source, relay process (--source wal)"
	walBaseLabel  = "pgoutbox, table set up for the WAL source: no relay"

	burnLabel             = "pgoutbox, table set up for the WAL source: no relay, a busy loop on the relay's CPU"
	queuedLabel           = "pgoutbox: Writer.Queue, no relay"
	walQueuedNoRelayLabel = "pgoutbox, table set up for the WAL source: Writer.Queue, no relay"
	walQueuedLabel        = "pgoutbox, Writer.Queue: WAL source, relay process (--source wal)"
	walQueuedBaseLabel    = "pgoutbox, Writer.Queue, table set up for the WAL source: no relay"
)

// writePhases are the write figure's phases, in sets: each relay phase runs
// between two no-relay phases of its set, and each set starts and ends with
// a business-only phase (the same writers, no outbox at all). pgoutbox's writers are an
// application's (pgx, Writer.Write); the relay runs in their process on a
// pool of its own, or as a process of its own (the outbox relay daemon).
func (h *harness) writePhases() []writeSet {
	const app = "pgoutbox: "
	ours := writeSet{business: businessPhase(true), base: writePhase{label: app + "no relay", design: designOurs, app: true}, phases: []writePhase{
		{label: app + "relay polling (no wake-up)", design: designOurs, relay: "inproc", app: true},
		{label: app + "relay with Listen, writers call a shared Notifier", design: designOurs, relay: "inproc", wakeup: "notify", app: true},
		{label: app + "writers call Relay.Wake()", design: designOurs, relay: "inproc", wakeup: "wake", app: true},
		{label: app + "relay polling, DeleteOnPublish", design: designOurs, relay: "inproc", app: true, del: true},
		{label: app + "relay process with Listen, writers call a shared Notifier", design: designOurs, relay: "child", wakeup: "notify", app: true},
	}}
	// The WAL source's own set: its table is set up for it (without the
	// indexes only a table source reads), so its no-relay phase is that
	// table too. No wake-up: the stream is its own.
	walSet := writeSet{business: businessPhase(true), base: writePhase{label: walBaseLabel, design: designOurs, app: true, lean: true}, phases: []writePhase{
		{label: walWriteLabel, design: designOurs, relay: "child", app: true, source: string(outbox.SourceWAL)},
	}}
	// Writers that queue the event on the order's batch (Writer.Queue),
	// beside those that write it with a statement of its own: a phase
	// without relay, for the ratio of the two, in both sets; and the WAL
	// source's relay phase again with such writers.
	ours.phases = append(ours.phases, writePhase{label: queuedLabel, design: designOurs, app: true, queued: true})
	walSet.phases = append(walSet.phases, writePhase{label: walQueuedNoRelayLabel, design: designOurs, app: true, lean: true, queued: true})
	walQueued := writeSet{business: businessPhase(true), base: writePhase{label: walQueuedBaseLabel, design: designOurs, app: true, lean: true, queued: true}, phases: []writePhase{
		{label: walQueuedLabel, design: designOurs, relay: "child", app: true, source: string(outbox.SourceWAL), queued: true},
	}}
	if h.opt.Extra {
		walSet.phases = append(walSet.phases, writePhase{label: app + "WAL source, relay process, BatchDelay off (a read per server message)", design: designOurs, relay: "child", app: true, source: string(outbox.SourceWAL), delay: -1})
	}
	if h.opt.PinRelay {
		// The floor under the WAL source's figure: the relay's CPU kept
		// busy by a process that does nothing else.
		walSet.phases = append(walSet.phases, writePhase{label: burnLabel, design: designOurs, relay: "burn", app: true, lean: true})
	}
	if h.walErr != nil {
		walSet.phases, walQueued.phases = nil, nil
	}
	sql := writeSet{business: businessPhase(false), base: writePhase{label: "pgoutbox, database/sql writers: no relay", design: designOurs}}
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
	sets := []writeSet{ours, walSet, walQueued, sql,
		{business: businessPhase(false), base: writePhase{label: "baseline: no trigger, no relay", design: designBaseline}, phases: []writePhase{
			{label: "baseline: NOTIFY trigger + its LISTEN relay", design: designBaseline, relay: "child"},
		}},
	}
	keep := func(ok func(writePhase) bool) {
		for i := range sets {
			var kept []writePhase
			for _, p := range sets[i].phases {
				if ok(p) {
					kept = append(kept, p)
				}
			}
			sets[i].phases = kept
		}
	}
	if h.opt.PinRelay {
		// A relay in the writers' process cannot have CPUs of its own.
		keep(func(p writePhase) bool { return p.relay != "inproc" })
	}
	keep(func(p writePhase) bool { return p.relay == "burn" || matchesFilter(p.label, h.opt.Filter) })
	return sets
}

type writeSet struct {
	business writePhase // the same writers without outbox
	base     writePhase // the design's writers, no relay
	phases   []writePhase
}

// businessPhase writes the order row alone, through pgx (app) or
// database/sql, like the set's writers.
func businessPhase(app bool) writePhase {
	if app {
		return writePhase{label: "business only: the order row, no outbox (pgx writers)", design: designOurs, app: true, business: true}
	}
	return writePhase{label: "business only: the order row, no outbox (database/sql writers)", design: designOurs, business: true}
}

// writeRun measures every write-cost phase once. The machine is shared and
// its load drifts within seconds, so each relay phase is sandwiched between
// two no-relay phases of its set, and its ratio is taken against their
// mean: O B R1 B R2 B ... B O. The business-only phases O at both ends give
// what the outbox itself costs the same writers (see chainRatios).
func (h *harness) writeRun(ctx context.Context, r *results) error {
	for _, set := range h.writePhases() {
		if len(set.phases) == 0 {
			continue
		}
		rates := make([]float64, 0, 2*len(set.phases)+3)
		for _, p := range set.sequence() {
			rate, err := h.writePhase(ctx, r, p)
			if err != nil {
				return fmt.Errorf("%s: %w", p.label, err)
			}
			rates = append(rates, rate)
		}
		ratios, vsBusiness, baseVsBusiness := chainRatios(rates)
		bf, of := r.write(set.base.label), r.write(set.business.label)
		for i, p := range set.phases {
			f := r.write(p.label)
			f.Ratio = append(f.Ratio, ratios[i])
			f.VsBusiness = append(f.VsBusiness, vsBusiness[i])
			bf.Ratio = append(bf.Ratio, 1)
		}
		bf.VsBusiness = append(bf.VsBusiness, baseVsBusiness)
		of.VsBusiness = append(of.VsBusiness, 1)
	}
	return nil
}

// sequence is the order the set's phases run in: O B R1 B R2 B ... Rn B O.
func (s writeSet) sequence() []writePhase {
	seq := []writePhase{s.business, s.base}
	for _, p := range s.phases {
		seq = append(seq, p, s.base)
	}
	return append(seq, s.business)
}

// chainRatios turns the rates of one set's sequence (O B R1 B ... Rn B O)
// into each relay phase's ratio to the mean of its two neighbouring
// no-relay phases, the no-relay writers' ratio to business only (the mean
// of the two ends' B/O, each an adjacent pair), and each relay phase's
// ratio to business only: its ratio to no relay times that. Every ratio is
// thus taken between adjacent phases, never across the whole set, over
// which the shared machine's load drifts.
func chainRatios(rates []float64) (ratios, vsBusiness []float64, baseVsBusiness float64) {
	n := (len(rates) - 3) / 2
	if n < 1 || len(rates) != 2*n+3 {
		return nil, nil, 0
	}
	last := len(rates) - 1
	baseVsBusiness = (rates[1]/rates[0] + rates[last-1]/rates[last]) / 2
	for i := range n {
		before, rate, after := rates[1+2*i], rates[2+2*i], rates[3+2*i]
		ratio := rate / ((before + after) / 2)
		ratios = append(ratios, ratio)
		vsBusiness = append(vsBusiness, ratio*baseVsBusiness)
	}
	return ratios, vsBusiness, baseVsBusiness
}

func (h *harness) writePhase(ctx context.Context, r *results, p writePhase) (float64, error) {
	return h.writePhaseInto(ctx, r.write(p.label), p, h.opt.WriteRate)
}

// writePhaseInto measures p once into f, the writers paced at rate orders/s
// in all (0: full speed).
func (h *harness) writePhaseInto(ctx context.Context, f *writeFigure, p writePhase, rate int) (float64, error) {
	var s string
	var err error
	switch {
	case p.design == designWatermill:
		s, err = h.setupWatermill(ctx, "write")
	case p.business:
		s, err = h.setupBusiness(ctx, "write")
	case p.source == string(outbox.SourceWAL):
		s, err = h.setupWAL(ctx, "write")
	case p.lean:
		s, err = h.setupLean(ctx, "write")
	case p.design == designOurs:
		s, err = h.setupOurs(ctx, "write")
	default:
		s, err = h.setupBaseline(ctx, "write", p.relay != "")
	}
	if s != "" {
		defer h.release(ctx, s)
	}
	if err != nil {
		return 0, err
	}
	h.checkpoint(ctx) // each phase starts with no checkpoint pending (full-page writes after one double the WAL)
	pool, db, err := h.writerDB(ctx, s)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	defer db.Close()

	w := writers{n: h.opt.Writers}
	if p.writers > 0 {
		w.n = p.writers
	}
	switch {
	case p.business && p.app:
		w.create = func(ctx context.Context, o Order) error { return appCreateBusiness(ctx, pool, o) }
	case p.business:
		w.create = func(ctx context.Context, o Order) error { return sqlCreateBusiness(ctx, db, o) }
	case p.design == designWatermill:
		w.create = func(ctx context.Context, o Order) error { return appWatermillOrder(ctx, pool, o) }
	case p.design == designOurs:
		ow, err := outbox.NewWriter(outbox.WriterConfig{Schema: s})
		if err != nil {
			return 0, err
		}
		switch {
		case p.app && p.queued:
			w.create = func(ctx context.Context, o Order) error { return appQueueOrder(ctx, pool, ow, o) }
		case p.app:
			w.create = func(ctx context.Context, o Order) error { return appCreateOrder(ctx, pool, ow, o) }
		default:
			w.create = func(ctx context.Context, o Order) error { return pgoutboxCreateOrder(ctx, db, ow, o) }
		}
	default:
		w.create = func(ctx context.Context, o Order) error { return baselineCreateOrder(ctx, db, o) }
	}

	sessions := map[string]string{"writers": h.prefix + "_writers"}
	var fin func(committed int64) (relayResult, error)
	var killRelay func() // a relay process, on an error before the writers ran
	relayPID := 0
	switch p.relay {
	case "child":
		spec := h.spec(p.design, s, pubMemory)
		if p.design == designWatermill {
			if spec, err = h.watermillSpec(ctx, s); err != nil {
				return 0, err
			}
		}
		spec.Listen = p.wakeup == "notify"
		spec.AsyncCommit = p.async
		spec.Delete = p.del
		spec.BatchDelay = p.delay
		spec.Rescan = p.rescan
		spec.Source = p.source
		spec.TraceSQL = p.trace && p.design != designWatermill
		sessions["relay"] = spec.AppName
		if h.opt.WriteProfile != "" {
			spec.Profile = filepath.Join(h.opt.WriteProfile, fmt.Sprintf("%03d-relay-process.pprof", h.seq))
		}
		if p.source == string(outbox.SourceWAL) {
			sessions["walsender"] = h.walsenderApp(s)
		}
		child, err := spawnRelay(ctx, spec)
		if err != nil {
			return 0, err
		}
		if err := child.start(); err != nil {
			child.kill()
			return 0, err
		}
		relayPID = child.cmd.Process.Pid
		killRelay = child.kill
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
	case "burn":
		burner, err := spawnBurner(ctx)
		if err != nil {
			return 0, err
		}
		relayPID = burner.Process.Pid
		killRelay = func() { _ = burner.Process.Kill(); _ = burner.Wait() }
		defer killRelay()
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

	var pin *pinner
	if h.opt.PinRelay {
		if pin, err = h.pinStart(ctx, []string{sessions["writers"]}, []string{sessions["relay"], sessions["walsender"]}, relayPID); err != nil {
			if killRelay != nil {
				killRelay()
			}
			return 0, err
		}
	}
	h.logf("write: %s, %d writers for %s", p.label, w.n, h.opt.WriteWindow)
	probe := h.probeStart(ctx, s, p.label, sessions, relayPID)
	var st writeStats
	if rate > 0 {
		st = w.paced(ctx, rate, h.opt.WriteWindow)
	} else {
		st = w.fullSpeed(ctx, h.opt.WriteWindow)
	}
	if pin != nil {
		if err := pin.stop(); err != nil {
			f.Notes = append(f.Notes, err.Error())
		}
	}
	pr := probe.stop(ctx, st.Committed)
	achieved := float64(st.Committed) / st.Elapsed.Seconds()
	f.Rate = append(f.Rate, achieved)
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
		table := "outbox_events"
		if p.design == designWatermill {
			table = watermillTable
		}
		rows, err := h.rowCount(ctx, s, table)
		if err != nil {
			return 0, err
		}
		res, err := fin(orders)
		if f.SQL == nil && len(res.SQL) > 0 && orders > 0 {
			f.SQL, f.SQLEvents = res.SQL, orders
		}
		wal := p.source == string(outbox.SourceWAL)
		ok := err == nil && res.Delivery.OK() && (p.del || wal || orders == rows)
		if err != nil {
			f.Notes = append(f.Notes, err.Error())
		}
		if wal && err == nil {
			// The WAL source deletes what it published: nothing may be left.
			left, err := h.rowCount(ctx, s, "outbox_events")
			if err != nil {
				return 0, err
			}
			if left != 0 {
				ok = false
				f.Notes = append(f.Notes, fmt.Sprintf("%d rows left in the table after every event was confirmed", left))
			}
		}
		f.OK = append(f.OK, ok)
		f.Dups = append(f.Dups, res.Delivery.Dups())
		msg = fmt.Sprintf(", delivered %d/%d, dups %d", res.Delivery.Distinct, orders, res.Delivery.Dups())
	}
	// The relay's PostgreSQL CPU counts its walsender, as the table does.
	h.logf("write: %s: %.0f orders/s; per order %.0f B WAL, %.1f records, %.3f FPI, CPU µs: writers' PostgreSQL %.0f, relay's PostgreSQL %.0f, relay process %.0f; %.0f claims/s, %.1f orders/claim%s; waits %v",
		p.label, achieved, pr.WALBytes, pr.WALRecs, pr.FPI, pr.BackendCPU["writers"], pr.BackendCPU["relay"]+pr.BackendCPU["walsender"], pr.RelayProcCPU,
		pr.ClaimsPS, pr.PerClaim, msg, pr.Waits)
	return achieved, nil
}
