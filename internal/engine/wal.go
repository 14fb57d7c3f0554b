package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

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
	e     *Engine
	names wal.Names
	// qd marks outcomes with published rows deleted.
	qd *store.Queries

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
	n := wal.NamesFor(e.cfg.Names)
	s := &walSource{e: e, names: n, qd: store.New(e.cfg.Names, true), state: SourceState{Slot: n.Slot}}
	s.del = newDeleter(s)
	return s
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
	ctx, cancel := context.WithTimeout(ctx, max(e.cfg.StatementTimeout, 30*time.Second))
	defer cancel()
	n := e.ws.names
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
	log := s.e.cfg.Logger.With("slot", s.names.Slot)
	m := s.e.cfg.Metrics
	failures := 0
	standby := false
	for ctx.Err() == nil {
		err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		s.setState(func(st *SourceState) { st.Streaming, st.Err = false, err })
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
	full, err := wal.HasTableSourceIndexes(cctx, e.pool, s.names)
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
	for attempt := 1; ctx.Err() == nil; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, max(e.cfg.StatementTimeout, 30*time.Second))
		err := s.replaceSlot(cctx)
		cancel()
		if err == nil {
			break
		}
		wait := e.cfg.OutageBackoff.Delay(attempt)
		log.Error("outbox WAL source: cannot create a fresh slot; still relaying from the table", "err", err, "retry_in", wait)
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
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout)
		tag, err := e.pool.Exec(cctx, s.names.MarkBacklogSQL())
		cancel()
		switch {
		case ctx.Err() != nil:
			return false
		case err != nil:
			e.cfg.Logger.Warn("outbox WAL source: cannot hand the pending rows to the table path", "err", err)
		case tag.RowsAffected() > 0:
			e.Wake()
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

// replaceSlot creates a fresh slot, dropping the old one first if it was
// invalidated (PostgreSQL keeps a lost slot listed until it is dropped).
func (s *walSource) replaceSlot(ctx context.Context) error {
	st, err := wal.Inspect(ctx, s.e.pool, s.names)
	if err != nil {
		return err
	}
	if st.Exists && st.WALStatus == "lost" {
		if err := wal.DropSlot(ctx, s.e.pool, s.names); err != nil {
			return err
		}
	}
	_, err = wal.Create(ctx, s.e.pool, s.names)
	return err
}

// stream opens the slot and relays from it until an error.
func (s *walSource) stream(ctx context.Context) error {
	e := s.e
	st, err := wal.Open(ctx, wal.StreamConfig{ConnConfig: &e.pool.Config().ConnConfig.Config, Names: s.names,
		Timeout: max(wal.DefaultTimeout, 3*e.cfg.StatementTimeout),
		Pace:    e.cfg.BatchDelay, PaceAbove: e.cfg.BatchDelayAbove})
	if err != nil {
		return err
	}
	defer func() {
		_ = s.del.barrier()
		s.del.close()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.StatementTimeout)
		_ = st.Close(cctx)
		cancel()
	}()
	s.carry, s.bad, s.again = nil, nil, nil
	s.left = map[pglogrepl.LSN]int{}
	s.xids = map[pglogrepl.LSN]uint32{}
	s.setState(func(x *SourceState) { x.Streaming, x.Standby, x.Err = true, false, nil })
	if m := e.cfg.Metrics; m != nil {
		m.Streaming.Set(1)
	}
	e.cfg.Logger.Info("outbox WAL source: streaming", "slot", s.names.Slot, "from", st.Confirmed().String())
	outages := 0
	for {
		rows, err := s.gather(ctx, st)
		if err != nil {
			return err
		}
		res, err := s.batch(ctx, st, rows)
		if err != nil {
			return err
		}
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
			return ctx.Err()
		}
	}
}

// gather returns the next batch: the rows to offer again if the last batch
// met a destination that was down, else up to the batch size (and byte
// budget) of events, waiting for the first transaction and taking whatever
// else is decoded already. A transaction may span batches.
func (s *walSource) gather(ctx context.Context, st *wal.Stream) ([]*Row, error) {
	if len(s.again) > 0 {
		rows := s.again
		s.again = nil
		return rows, nil
	}
	if len(s.carry) == 0 && len(s.bad) == 0 {
		select {
		case <-st.Done():
			return nil, st.Err()
		default:
		}
		tx, err := st.Next(ctx)
		if err != nil {
			return nil, err
		}
		s.add(tx)
	}
	limit, budget := int(s.e.limit.Load()), s.e.cfg.MaxBatchBytes
	var rows []*Row
	bytes := 0
	for {
		for len(s.carry) > 0 && len(rows) < limit && (len(rows) == 0 || bytes+len(s.carry[0].Payload) <= budget) {
			r := s.carry[0]
			s.carry = s.carry[1:]
			rows = append(rows, r)
			bytes += len(r.Payload)
		}
		if len(rows) >= limit || len(s.carry) > 0 {
			break
		}
		tx, ok := st.TryNext()
		if !ok {
			break
		}
		s.add(tx)
	}
	if len(s.carry) == 0 {
		s.carry = nil // let the backing array go
	}
	return rows, nil
}

// add queues a transaction's events as rows.
func (s *walSource) add(tx *wal.Tx) {
	s.lmu.Lock()
	s.left[tx.LSN] = len(tx.Events) + len(tx.Errors)
	s.xids[tx.LSN] = tx.Xid
	s.lmu.Unlock()
	backing := make([]Row, len(tx.Events))
	for i, ev := range tx.Events {
		r := &backing[i]
		r.Message, r.stored, r.lsn, r.xid = ev, len(ev.Payload), tx.LSN, tx.Xid
		if tx.DeliverAt != nil {
			r.deliverAt = tx.DeliverAt[i]
		}
		s.carry = append(s.carry, r)
	}
	s.bad = append(s.bad, tx.Errors...)
}

// walPlan is what one stream batch does besides publishing.
type walPlan struct {
	send    []*Row             // to publish
	skip    []*Row             // already the table path's: settled without a publish
	handoff []*Row             // scheduled for later: handed to the table path unpublished
	holds   []hold             // ordered: parked behind an earlier event of their aggregate
	bad     []*wal.DecodeError // dead-lettered by id
}

type aggKey struct{ typ, id string }

type hold struct {
	row    *Row
	holder [16]byte
}

// batch publishes one batch from the stream and settles it: published rows
// deleted, failures marked and handed to the table path, rows of a
// destination that is down kept to be offered again; then the transactions
// whose every event is settled are acknowledged.
func (s *walSource) batch(ctx context.Context, st *wal.Stream, rows []*Row) (Result, error) {
	e := s.e
	start := time.Now()
	bg := context.WithoutCancel(ctx)
	p := walPlan{}
	p.bad, s.bad = s.bad, nil
	now := time.Now()
	for _, r := range rows {
		if !r.deliverAt.IsZero() && r.deliverAt.After(now) {
			p.handoff = append(p.handoff, r)
			continue
		}
		p.send = append(p.send, r)
	}
	if e.cfg.Ordered && len(p.send) > 0 {
		if err := s.checkOrder(bg, &p); err != nil {
			return Result{}, err
		}
	}
	res := Result{Claimed: len(rows)}
	var (
		sets    *settlement
		ackedAt time.Time
	)
	if len(p.send) > 0 {
		attempts := e.publishBatch(bg, p.send)
		ackedAt = time.Now()
		e.adaptLimit(int(e.limit.Load()), len(p.send), ackedAt.Sub(start))
		sets = e.settle(p.send, attempts)
		e.report(p.send, sets)
		res.Retried, res.DeadLettered = sets.retried, sets.dead
		res.Unavailable, res.UnavailableErr, res.UnavailableWait = sets.unavailable, sets.unavailableErr, sets.unavailableWait
		s.afterPublish(&p, sets)
	}
	// Every row of the batch but those offered again is settled once the
	// record commits.
	again := map[*Row]bool{}
	for _, r := range s.again {
		again[r] = true
	}
	lsns := make([]pglogrepl.LSN, 0, len(rows)+len(p.bad))
	for _, r := range rows {
		if !again[r] {
			lsns = append(lsns, r.lsn)
		}
	}
	for _, d := range p.bad {
		lsns = append(lsns, d.LSN)
	}
	if sets != nil {
		res.Published = sets.published
		e.observe(ctx, &claim{rows: p.send, start: start}, sets, ackedAt)
	}
	if len(p.holds) == 0 && len(p.handoff) == 0 && len(p.bad) == 0 && (sets == nil || sets.retried+sets.dead == 0) {
		// Only deletes: in the background, merged with the next batches'.
		j := &deletion{lsns: lsns}
		if sets != nil {
			for i, r := range p.send {
				if sets.outcomes[i].verdict == published {
					j.ids = append(j.ids, r.ID)
					j.xids = append(j.xids, r.xid)
				}
			}
		}
		return res, s.del.add(bg, st, j)
	}
	// Records that hand rows to the table run after every deletion queued
	// before them, and before the next batch's order check, which reads
	// what they write.
	if err := s.del.barrier(); err != nil {
		return res, err
	}
	if err := s.record(bg, &p, sets); err != nil {
		return res, err
	}
	for _, l := range lsns {
		if err := s.settled(st, l); err != nil {
			return res, err
		}
	}
	return res, nil
}

// settled counts one event of the transaction at lsn as settled and
// acknowledges the transaction once all are.
func (s *walSource) settled(st *wal.Stream, lsn pglogrepl.LSN) error {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	n, ok := s.left[lsn]
	if !ok {
		return fmt.Errorf("WAL source: settle an event of an unknown transaction ending at %s", lsn)
	}
	if n > 1 {
		s.left[lsn] = n - 1
		return nil
	}
	delete(s.left, lsn)
	delete(s.xids, lsn)
	return st.Ack(lsn)
}

// checkOrder (ordered mode) finds the aggregates of the batch that have an
// event on the table path (failing, held, dead, scheduled, re-queued:
// retry_after or dead_at set) and parks the batch's events of those
// aggregates behind it, in commit order, instead of publishing them. An
// aggregate is thus on one path at a time, and never inverted across them.
//
// A batch event already handed to the table path (a stream reopened after
// a crash offers again what the last one settled) is the table path's:
// it is left as it is. Parking it again would give it a new seq, behind
// later events of its aggregate handed over since, and the table path
// would then publish those first, or wait forever on events parked behind
// it with a lower seq.
func (s *walSource) checkOrder(ctx context.Context, p *walPlan) error {
	e := s.e
	seen := map[aggKey]bool{}
	var typs, aggs []string
	ids := make([][16]byte, 0, len(p.send))
	for _, r := range p.send {
		ids = append(ids, r.ID)
		k := aggKey{r.AggregateType, r.AggregateID}
		if !seen[k] {
			seen[k] = true
			typs, aggs = append(typs, k.typ), append(aggs, k.id)
		}
	}
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	// The first table-path event of each aggregate (head = true), one probe
	// of the handoff order index each, however many events of it wait; and
	// the batch's events already handed over, by id. A batch event the
	// stream still owns is never a head: one the housekeeping parked behind
	// a table-path event is parked again, behind its aggregate's first.
	t := e.cfg.Names.QTable
	q := `SELECT a.typ, a.agg, h.id, true
FROM unnest($1::text[], $2::text[]) AS a(typ, agg)
CROSS JOIN LATERAL (
  SELECT o.id FROM ` + t + ` AS o
  WHERE o.aggregate_type = a.typ AND o.aggregate_id = a.agg
    AND o.processed_at IS NULL AND (o.retry_after IS NOT NULL OR o.dead_at IS NOT NULL)
    AND NOT (o.id = ANY($3::uuid[]) AND o.retry_after IS NULL)
  ORDER BY o.seq
  LIMIT 1) AS h
UNION ALL
SELECT o.aggregate_type, o.aggregate_id, o.id, false FROM ` + t + ` AS o
WHERE o.id = ANY($3::uuid[]) AND o.processed_at IS NULL AND o.retry_after IS NOT NULL`
	blocked := map[aggKey][16]byte{}
	handed := map[[16]byte]bool{}
	// Planned for these values: a plan cached while the table was small
	// may read every row (see plans.go).
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(`SELECT ` + customPlans)
	b.Queue(q, typs, aggs, ids).Query(func(rs pgx.Rows) error {
		var k aggKey
		var id [16]byte
		var head bool
		_, err := pgx.ForEachRow(rs, []any{&k.typ, &k.id, &id, &head}, func() error {
			if head {
				blocked[k] = id
			} else {
				handed[id] = true
			}
			return nil
		})
		return err
	})
	b.Queue("COMMIT")
	if err := e.pool.SendBatch(sctx, b).Close(); err != nil {
		return inPhase("order check", err)
	}
	if len(blocked) == 0 {
		s.markFollowers(p.send)
		return nil
	}
	send := p.send[:0:0]
	for _, r := range p.send {
		k := aggKey{r.AggregateType, r.AggregateID}
		head, ok := blocked[k]
		switch {
		case !ok:
			send = append(send, r)
		case handed[r.ID]:
			p.skip = append(p.skip, r) // the table path publishes it
		default:
			p.holds = append(p.holds, hold{row: r, holder: head})
		}
	}
	p.send = send
	s.markFollowers(p.send)
	return nil
}

// markFollowers flags every event after the first of its aggregate in the
// batch, so the publish goes out one event per aggregate per round and
// stops an aggregate's run at its first unconfirmed event.
func (s *walSource) markFollowers(rows []*Row) {
	seen := map[aggKey]bool{}
	for _, r := range rows {
		k := aggKey{r.AggregateType, r.AggregateID}
		r.Follower = seen[k]
		seen[k] = true
	}
}

// afterPublish sorts the rows left behind by the publish: an ordered run
// stopped at a failure is parked behind the failed event (which the table
// path now owns); rows of a destination that is down are offered again.
func (s *walSource) afterPublish(p *walPlan, sets *settlement) {
	failed := map[aggKey][16]byte{}
	down := map[aggKey]bool{}
	for i, r := range p.send {
		k := aggKey{r.AggregateType, r.AggregateID}
		switch sets.outcomes[i].verdict {
		case retry, dead:
			failed[k] = r.ID
		case unavailable:
			down[k] = true
			s.again = append(s.again, r)
		case untouched:
			if id, ok := failed[k]; ok && !down[k] {
				p.holds = append(p.holds, hold{row: r, holder: id})
			} else {
				down[k] = true
				s.again = append(s.again, r)
			}
		}
	}
}

// record writes a stream batch's outcomes in one transaction: published
// rows deleted, failures marked (the table path retries them), parked and
// handed-over rows, dead-lettered undecodable rows.
func (s *walSource) record(ctx context.Context, p *walPlan, sets *settlement) error {
	e := s.e
	xids := map[uint32]bool{}
	for _, rs := range [][]*Row{p.send, p.handoff} {
		for _, r := range rs {
			xids[r.xid] = true
		}
	}
	for _, h := range p.holds {
		xids[h.row.xid] = true
	}
	s.lmu.Lock()
	for _, d := range p.bad {
		xids[s.xids[d.LSN]] = true
	}
	s.lmu.Unlock()
	if err := s.waitVisible(ctx, xids); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(`SELECT ` + customPlans)
	opening := b.Len()
	if sets != nil {
		a := e.markArgsOf(p.send, sets)
		switch {
		case len(a.failIDs) > 0:
			b.Queue(s.qd.MarkOutcomes, a.okIDs, a.failIDs, a.failErrs, a.failDelays, a.failDead, a.failCount)
		case len(a.okIDs) > 0:
			b.Queue(s.qd.MarkPublished, a.okIDs)
		}
	}
	t := e.cfg.Names.QTable
	for _, h := range p.holds {
		// retry_after IS NULL: an event the table path owns already keeps
		// its place (see checkOrder).
		b.Queue(`UPDATE `+t+` SET held_by = $2, dead_at = now(), retry_after = now(), seq = DEFAULT
WHERE id = $1 AND processed_at IS NULL AND retry_after IS NULL`, h.row.ID, h.holder)
	}
	if len(p.handoff) > 0 {
		ids := make([][16]byte, len(p.handoff))
		for i, r := range p.handoff {
			ids[i] = r.ID
		}
		b.Queue(`UPDATE `+t+` SET retry_after = COALESCE(retry_after, now()) WHERE id = ANY($1::uuid[]) AND processed_at IS NULL`, ids)
	}
	for _, d := range p.bad {
		if [16]byte(d.ID) == [16]byte{} {
			e.cfg.Logger.Error("outbox WAL source: an outbox row cannot be decoded and has no readable id; it stays in the table, unrelayed: fix or delete it by hand",
				"lsn", d.LSN.String(), "err", d.Err)
			continue
		}
		b.Queue(`UPDATE `+t+` SET dead_at = now(), retry_after = COALESCE(retry_after, now()), last_error = $2
WHERE id = $1 AND processed_at IS NULL`, [16]byte(d.ID), truncate("cannot decode the row from the WAL: "+d.Err.Error(), lastErrorMax))
		e.cfg.Logger.Error("outbox WAL source: an outbox row cannot be decoded; dead-lettered", "event_id", d.ID, "err", d.Err)
	}
	if b.Len() == opening {
		return nil // nothing to write
	}
	b.Queue("COMMIT")
	// The record updates rows one statement at a time, in commit order, while
	// the table workers and the housekeeping update rows of the same
	// aggregates: PostgreSQL may end one of them as a deadlock. The record
	// is rolled back whole, so sending it again is safe, and cheaper than
	// reopening the stream, which would offer the batch again.
	var err error
	for try := 1; try <= recordTries; try++ {
		if err = s.send(ctx, copyBatch(b)); err == nil || !isDeadlock(err) {
			break
		}
	}
	if err != nil {
		return err
	}
	if len(p.holds) > 0 || len(p.handoff) > 0 {
		e.cur.reset()
	}
	return nil
}

// recordTries is how many times a stream batch's record is sent when
// PostgreSQL ends it as a deadlock.
const recordTries = 3

// isDeadlock reports whether err is PostgreSQL's deadlock_detected.
func isDeadlock(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "40P01"
}

// copyBatch returns a fresh batch of b's statements: pgx keeps in a sent
// batch what it learnt of each statement on the connection it used, and a
// resend may get another connection.
func copyBatch(b *pgx.Batch) *pgx.Batch {
	c := &pgx.Batch{}
	for _, q := range b.QueuedQueries {
		c.Queue(q.SQL, q.Arguments...)
	}
	return c
}

// slotStates are the values of outbox_replication_slot_state's label.
var slotStates = []string{"reserved", "extended", "unreserved", "lost", "missing"}

// refreshGauges reads the slot's row and sets the replication gauges.
func (s *walSource) refreshGauges(ctx context.Context) error {
	st, err := wal.Inspect(ctx, s.e.pool, s.names)
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

// waitVisible waits until the transactions xids are visible to new
// snapshots. The stream hands out a transaction once its commit record is
// flushed, which can be a moment before the committing backend leaves the
// proc array: a DELETE or UPDATE of its rows in that moment would find
// nothing, and the slot would move past rows never settled.
func (s *walSource) waitVisible(ctx context.Context, xids map[uint32]bool) error {
	// Ids below the last snapshot's xmin are visible for good: a backlog
	// needs no query at all.
	for x := range xids {
		if s.horizon.below(x) {
			delete(xids, x)
		}
	}
	if len(xids) == 0 {
		return nil
	}
	e := s.e
	deadline := time.Now().Add(e.cfg.StatementTimeout)
	for {
		var snap string
		sctx, cancel := e.stmtCtx(ctx)
		err := e.pool.QueryRow(sctx, `SELECT pg_current_snapshot()::text`).Scan(&snap)
		cancel()
		if err != nil {
			return inPhase("snapshot", err)
		}
		ok, err := visibleIn(snap, xids)
		if err != nil || ok {
			if err == nil {
				s.horizon.set(snap)
			}
			return err
		}
		if time.Now().After(deadline) {
			return inPhase("wait for commits to be visible", fmt.Errorf("transactions streamed %s ago are still in progress in snapshot %s", e.cfg.StatementTimeout, snap))
		}
		if !e.sleep(ctx, time.Millisecond, false) {
			return ctx.Err()
		}
	}
}

// horizon is the xmin and xmax of the last snapshot read: every
// transaction id below xmin had completed.
type horizon struct {
	mu         sync.Mutex
	xmin, xmax uint64
}

func (h *horizon) set(snap string) {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) != 3 {
		return
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	h.mu.Lock()
	h.xmin, h.xmax = xmin, xmax
	h.mu.Unlock()
}

// below reports whether the 32-bit id xid is below the last xmin (ids
// within 2^31 of xmax, as every id in use is).
func (h *horizon) below(xid uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.xmax == 0 {
		return false
	}
	x := h.xmax&^0xffffffff | uint64(xid)
	if x >= h.xmax {
		if x-h.xmax < 1<<31 || h.xmax < 1<<32 {
			return false
		}
		x -= 1 << 32
	}
	return x < h.xmin
}

// visibleIn reports whether every 32-bit transaction id in xids is visible
// in snap, a pg_snapshot's text ("xmin:xmax:xip,..."), whose 64-bit ids
// carry the epoch the 32-bit ones lack.
func visibleIn(snap string, xids map[uint32]bool) (bool, error) {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) != 3 {
		return false, fmt.Errorf("WAL source: snapshot %q: want xmin:xmax:xip", snap)
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return false, fmt.Errorf("WAL source: snapshot %q: %w", snap, err)
	}
	inProgress := map[uint64]bool{}
	if parts[2] != "" {
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return false, fmt.Errorf("WAL source: snapshot %q: %w", snap, err)
			}
			inProgress[x] = true
		}
	}
	for xid := range xids {
		x := xmax&^0xffffffff | uint64(xid)
		if x >= xmax {
			if x-xmax < 1<<31 || xmax < 1<<32 {
				return false, nil // not completed, as this snapshot sees it
			}
			x -= 1 << 32 // an id of the previous epoch
		}
		if x >= xmin && inProgress[x] {
			return false, nil
		}
	}
	return true, nil
}
