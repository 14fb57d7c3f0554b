package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/internal/wal"
)

// SourceState is what the engine's source is doing (see outbox.SourceStatus).
type SourceState struct {
	Slot      string
	Streaming bool
	Standby   bool
	Fallback  bool
	Confirmed string
	Err       error
}

// SourceState reports the WAL source's state; the zero value for a table
// source.
func (e *Engine) SourceState() SourceState {
	if e.ws == nil {
		return SourceState{}
	}
	e.ws.mu.Lock()
	defer e.ws.mu.Unlock()
	st := e.ws.state
	st.Fallback = e.fallback.Load()
	return st
}

// streamProgress is how long a stream must stay open, relaying nothing, to
// count as one that worked (see stream).
const streamProgress = 10 * time.Second

// standbyRetry is how often a standby relay tries to stream the slot: the
// takeover delay after the streaming relay dies.
const standbyRetry = 500 * time.Millisecond

// walSource streams the table's logical replication slot and publishes each
// committed event once, in commit order: no claim, no lock, no per-event
// UPDATE. What the broker confirmed is deleted in bulk; what failed is
// marked in the table exactly as the table path marks it, and the table
// workers own it from then on (retry_after set: see store.HandoffOnly). The
// slot is acknowledged only past transactions whose every event is deleted
// or handed over, so an event the broker did not confirm is always in the
// table.
type walSource struct {
	e *Engine
	// names are the slot's, resolved by Prepare (wal.Resolve: the
	// database is in the slot's name, and a slot of an older version's
	// name is adopted); a fallback may move them to a fresh slot. Read
	// through slot().
	names    wal.Names
	resolved bool
	// qd marks outcomes with published rows deleted; qs are the stream's
	// own statements.
	qd *store.Queries
	qs *store.StreamQueries

	mu    sync.Mutex
	state SourceState
	// handing: the slot is lost and the table has no index of the rows as
	// written, so the pending rows are handed over (see fallBack).
	handing atomic.Bool

	// Per stream; reset when a stream opens (it redelivers every
	// transaction it was not told about).
	carry   []*Row                   // read from the stream, not yet in a batch
	lmu     sync.Mutex               // left and xids: records settle in their own goroutine
	left    map[pglogrepl.LSN]int    // per transaction: events not yet settled
	xids    map[pglogrepl.LSN]uint32 // per transaction: its id
	del     *deleter                 // batches whose rows were all published
	horizon horizon                  // see waitVisible
	bad     []*wal.DecodeError       // rows the stream could not decode, to dead-letter
	again   []*Row                   // the last batch's rows to offer again (destination down)
}

func newWALSource(e *Engine) *walSource {
	s := &walSource{e: e, names: wal.NamesFor(e.cfg.Names, ""), qd: store.New(e.cfg.Names, true), qs: store.NewStream(e.cfg.Names)}
	s.del = newDeleter(s)
	return s
}

// slot returns the slot's names.
func (s *walSource) slot() wal.Names {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names
}

// resolve finds the slot's names in the database, once.
func (s *walSource) resolve(ctx context.Context) (wal.Names, error) {
	s.mu.Lock()
	if s.resolved {
		defer s.mu.Unlock()
		return s.names, nil
	}
	s.mu.Unlock()
	n, err := wal.Resolve(ctx, s.e.pool, s.e.cfg.Names)
	if err != nil {
		return n, err
	}
	if n.Adopted() {
		s.e.cfg.Logger.Info("outbox WAL source: streaming the slot of an older version's name; its position is kept",
			"slot", n.Slot, "new_name", n.Fresh().Slot)
	}
	s.mu.Lock()
	s.names, s.resolved, s.state.Slot = n, true, n.Slot
	s.mu.Unlock()
	return n, nil
}

func (s *walSource) setState(f func(*SourceState)) {
	s.mu.Lock()
	f(&s.state)
	s.mu.Unlock()
}

// Prepare checks the replication prerequisites and creates the handoff
// index, publication and slot when any is missing; a relay whose role may
// not create them needs them created beforehand (outbox migrate --source
// wal). Errors wrapping wal.ErrPrerequisite name what is missing.
func (e *Engine) Prepare(ctx context.Context) error {
	if e.ws == nil {
		return nil
	}
	ctx, cancel := e.ddlCtx(ctx)
	defer cancel()
	n, err := e.ws.resolve(ctx)
	if err != nil {
		return err
	}
	if err := wal.Check(ctx, e.pool, n); err != nil {
		return err
	}
	var indexes []string
	for _, name := range []func() (string, error){e.cfg.Names.HandoffIndex, e.cfg.Names.HandoffOrderIndex} {
		idx, err := name()
		if err != nil {
			return err
		}
		if e.cfg.Names.QSchema != "" {
			idx = e.cfg.Names.QSchema + "." + idx
		}
		indexes = append(indexes, idx)
	}
	ready, err := wal.Ready(ctx, e.pool, n, indexes...)
	if err != nil || ready {
		return err
	}
	if _, err := wal.Create(ctx, e.pool, n); err != nil {
		if isPrivilege(err) {
			return fmt.Errorf("%w: %v (create them with `outbox migrate --source wal` as the table's owner, or run the SQL of `outbox migrate sql --source wal`)", wal.ErrPrerequisite, err)
		}
		return err
	}
	return nil
}

func isPrivilege(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "42501"
}

// run streams the slot until ctx ends: standing by while another process
// streams it, falling back to the table while it is lost, reopening after
// any other error.
func (s *walSource) run(ctx context.Context) {
	for ctx.Err() == nil {
		if _, err := s.resolve(ctx); err == nil {
			break
		}
		if !s.e.sleep(ctx, standbyRetry, false) {
			return
		}
	}
	log := s.e.cfg.Logger.With("slot", s.slot().Slot)
	m := s.e.cfg.Metrics
	failures := 0
	standby := false
	for ctx.Err() == nil {
		progressed, err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			failures = 0 // a stream that worked: this interruption is a first one
		}
		s.setState(func(st *SourceState) { st.Streaming, st.Err = false, err })
		if !errors.Is(err, wal.ErrSlotBusy) {
			e := s.e
			e.stuck.batchFailed(err)
		}
		if m != nil {
			m.Streaming.Set(0)
		}
		var wait time.Duration
		switch {
		case errors.Is(err, wal.ErrSlotBusy):
			if !standby {
				log.Info("outbox WAL source: another relay streams the slot; standing by", "err", err)
			}
			standby, failures, wait = true, 0, standbyRetry
			s.setState(func(st *SourceState) { st.Standby = true })
		case errors.Is(err, wal.ErrSlotLost):
			standby = false
			s.setState(func(st *SourceState) { st.Standby = false })
			s.fallBack(ctx, log, err)
			continue
		default:
			standby = false
			s.setState(func(st *SourceState) { st.Standby = false })
			failures++
			wait = s.e.cfg.OutageBackoff.Delay(failures)
			log.Error("outbox WAL source: stream ended; reopening", "phase", phaseOf(err), "err", err, "retry_in", wait)
			if m != nil {
				m.DBErrors.Inc()
			}
		}
		if !s.e.sleep(ctx, wait, false) {
			return
		}
	}
}

// fallBack relays from the table while the slot is gone: the table workers
// claim every pending row, as a table source does, until a fresh slot
// exists and the rows pending before it are handed to the table path. A
// table set up for the WAL source has no index of the rows as written to
// claim them through: there the pending rows are handed to the table path
// every handEvery instead (one UPDATE, as when a slot is created), and the
// workers go on claiming the handed-over rows.
func (s *walSource) fallBack(ctx context.Context, log interface {
	Error(string, ...any)
	Info(string, ...any)
}, cause error) {
	e := s.e
	log.Error("outbox WAL source: the replication slot is lost; relaying from the table until a fresh slot streams (no event is lost: every unconfirmed event is still in the table)", "err", cause)
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout)
	full, err := wal.HasTableSourceIndexes(cctx, e.pool, s.slot())
	cancel()
	// Not knowing, hand over: that works on any table.
	s.handing.Store(err != nil || !full)
	e.fallback.Store(true)
	e.cur.reset()
	if m := e.cfg.Metrics; m != nil {
		m.Fallbacks.Inc()
		m.Source.WithLabelValues("wal").Set(0)
		m.Source.WithLabelValues("table").Set(1)
	}
	removedLogged := false
	for attempt := 1; ctx.Err() == nil; attempt++ {
		// Creating a slot waits for every transaction open on the server to
		// end: the pending rows are handed over meanwhile, not after.
		cctx, cancel := e.ddlCtx(ctx)
		done := make(chan error, 1)
		go func() { done <- s.replaceSlot(cctx) }()
		err, ok := s.handOverUntil(ctx, done)
		cancel()
		if !ok {
			<-done
			return
		}
		e.Signals.SlotAttempt.Send(err)
		if err == nil {
			break
		}
		wait := e.cfg.OutageBackoff.Delay(attempt)
		if errors.Is(err, wal.ErrRemoved) {
			// Relaying from the table until someone sets the source up again.
			wait = removedRecheck
			if !removedLogged {
				removedLogged = true
				log.Error("outbox WAL source: the WAL source was removed (outbox migrate drop-wal); relaying from the table, and not creating the slot again: restart the relay with --source table, or set the source up again with outbox migrate --source wal", "err", err)
			}
		} else {
			log.Error("outbox WAL source: cannot create a fresh slot; still relaying from the table", "err", err, "retry_in", wait)
		}
		s.setState(func(st *SourceState) { st.Err = err })
		if !s.handOver(ctx, wait) {
			return
		}
	}
	e.fallback.Store(false)
	s.handing.Store(false)
	if m := e.cfg.Metrics; m != nil {
		m.Source.WithLabelValues("wal").Set(1)
		m.Source.WithLabelValues("table").Set(0)
	}
	log.Info("outbox WAL source: fresh slot created; streaming again")
}

// removedRecheck is how often a relay whose WAL source was removed looks
// whether it was set up again.
const removedRecheck = 10 * time.Second

// handEvery is how often a fallback without the table source's indexes
// hands the pending rows to the table path: the latency of the events
// written while no slot streams.
const handEvery = time.Second

// handOver waits d, handing the pending rows to the table path every
// handEvery meanwhile when the fallback does so; false when ctx ended.
func (s *walSource) handOver(ctx context.Context, d time.Duration) bool {
	e := s.e
	if !s.handing.Load() {
		return e.sleep(ctx, d, false)
	}
	end := time.Now().Add(d)
	for {
		if !s.markBacklog(ctx) {
			return false
		}
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		if !e.sleep(ctx, min(left, handEvery), false) {
			return false
		}
	}
}

// markBacklog hands the pending rows to the table path once; false when
// ctx ended.
func (s *walSource) markBacklog(ctx context.Context) bool {
	e := s.e
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout)
	tag, err := e.pool.Exec(cctx, s.slot().MarkBacklogSQL())
	cancel()
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		e.cfg.Logger.Warn("outbox WAL source: cannot hand the pending rows to the table path", "err", err)
	case tag.RowsAffected() > 0:
		e.Wake()
	}
	return true
}

// handOverUntil hands the pending rows over every handEvery, when the
// fallback does so, until done yields; ok is false when ctx ended first.
// A slot creation still waiting after slotWaitLog is logged once, with the
// transaction it waits for.
func (s *walSource) handOverUntil(ctx context.Context, done <-chan error) (err error, ok bool) {
	start := time.Now()
	logged := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err, true
		case <-ctx.Done():
			return nil, false
		case <-t.C:
		}
		if !logged && time.Since(start) >= slotWaitLog {
			logged = true
			s.logSlotWait(ctx)
		}
		if s.handing.Load() {
			s.markBacklog(ctx)
		}
		t.Reset(handEvery)
	}
}

// slotWaitLog is how long a slot creation may wait before the relay says
// what it waits for.
const slotWaitLog = 2 * time.Second

// logSlotWait logs the oldest open transaction that holds an id: creating
// a logical slot waits for it to end.
func (s *walSource) logSlotWait(ctx context.Context) {
	e := s.e
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	var pid int
	var app, state string
	var age time.Duration
	err := e.pool.QueryRow(sctx, wal.OldestTransactionSQL).Scan(&pid, &app, &state, &age)
	if err != nil {
		e.cfg.Logger.Warn("outbox WAL source: the fresh slot waits for open transactions to end; relaying from the table meanwhile")
		return
	}
	e.cfg.Logger.Warn("outbox WAL source: the fresh slot waits for the transactions open on the server to end; relaying from the table meanwhile",
		"oldest_pid", pid, "oldest_application", app, "oldest_state", state, "oldest_age", age.Round(time.Second))
}

// replaceSlot creates a fresh slot, dropping the old one first if it was
// invalidated (PostgreSQL keeps a lost slot listed until it is dropped).
// A lost slot of an older version's name is replaced by one of the
// current name.
func (s *walSource) replaceSlot(ctx context.Context) error {
	n := s.slot()
	// drop-wal removed the source: creating it again would undo that.
	if err := wal.CheckNotRemoved(ctx, s.e.pool, n); err != nil {
		return err
	}
	st, err := wal.Inspect(ctx, s.e.pool, n)
	if err != nil {
		return err
	}
	if st.Exists && st.WALStatus == "lost" {
		if err := wal.DropSlot(ctx, s.e.pool, n); err != nil {
			return err
		}
	}
	if n.Adopted() {
		n = n.Fresh()
	}
	if _, err = wal.Create(ctx, s.e.pool, n); err != nil {
		return err
	}
	s.mu.Lock()
	s.names, s.state.Slot = n, n.Slot
	s.mu.Unlock()
	return nil
}

// stream opens the slot and relays from it until an error. progressed: it
// relayed a batch, or stayed open streamProgress, so the backoff of the
// reopens starts again.
func (s *walSource) stream(ctx context.Context) (progressed bool, err error) {
	e := s.e
	n := s.slot()
	opened := time.Now()
	st, err := wal.Open(ctx, wal.StreamConfig{ConnConfig: &e.sessionConfig().Config, Names: n,
		Timeout:       max(wal.DefaultTimeout, 3*e.cfg.StatementTimeout),
		SenderTimeout: e.cfg.SenderTimeout,
		// What waits for the next batch, bounded as one batch is.
		BufferBytes: e.cfg.MaxBatchBytes,
		Pace:        e.cfg.BatchDelay, PaceAbove: e.cfg.BatchDelayAbove})
	if err != nil {
		return false, err
	}
	batches := 0
	defer func() {
		progressed = batches > 0 || time.Since(opened) >= streamProgress
	}()
	defer func() {
		_ = s.del.barrier()
		s.del.close()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.StatementTimeout)
		_ = st.Close(cctx)
		cancel()
	}()
	// The partitions rotate while this relay streams, and stop with it.
	rctx, rstop := context.WithCancel(ctx)
	rdone := make(chan struct{})
	go func() {
		defer close(rdone)
		s.rotatePartitions(rctx)
	}()
	defer func() {
		rstop()
		<-rdone
	}()
	s.carry, s.bad, s.again = nil, nil, nil
	s.left = map[pglogrepl.LSN]int{}
	s.xids = map[pglogrepl.LSN]uint32{}
	s.setState(func(x *SourceState) { x.Streaming, x.Standby, x.Err = true, false, nil })
	if m := e.cfg.Metrics; m != nil {
		m.Streaming.Set(1)
	}
	e.cfg.Logger.Info("outbox WAL source: streaming", "slot", n.Slot, "from", st.Confirmed().String())
	outages := 0
	for {
		rows, err := s.gather(ctx, st)
		if err != nil {
			return false, err
		}
		res, err := s.batch(ctx, st, rows)
		if err != nil {
			return false, err
		}
		batches++
		s.setState(func(x *SourceState) { x.Confirmed = st.Confirmed().String() })
		if res.Unavailable == 0 {
			outages = 0
			continue
		}
		outages++
		wait := max(e.cfg.OutageBackoff.Delay(outages), res.UnavailableWait)
		e.cfg.Logger.Warn("broker unavailable, relay backing off; no attempt counted",
			"events", res.Unavailable, "err", res.UnavailableErr, "retry_in", wait, "source", "wal")
		if !e.sleep(ctx, wait, false) {
			return false, ctx.Err()
		}
	}
}

// slotStates are the values of outbox_replication_slot_state's label.
var slotStates = []string{"reserved", "extended", "unreserved", "lost", "missing"}

// refreshGauges reads the slot's row and sets the replication gauges.
func (s *walSource) refreshGauges(ctx context.Context) error {
	st, err := wal.Inspect(ctx, s.e.pool, s.slot())
	if err != nil {
		return err
	}
	m := s.e.cfg.Metrics
	state := st.WALStatus
	if !st.Exists {
		state = "missing"
	}
	for _, v := range slotStates {
		val := 0.0
		if v == state {
			val = 1
		}
		m.ReplicationSlotState.WithLabelValues(v).Set(val)
	}
	m.ReplicationLag.Set(float64(st.BehindBytes))
	m.ReplicationRetained.Set(float64(st.LagBytes))
	return nil
}
