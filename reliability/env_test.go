package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// env is one scenario's world: a schema with a migrated outbox table, a NATS
// server of its own with a stream, the history of the writers, and the
// counter of publishes on the wire.
type env struct {
	t      *testing.T
	schema string
	table  string // quoted, qualified
	pool   *pgxpool.Pool
	nats   *natsServer
	prefix string // subject prefix and stream name
	wire   *wireCounter
	hist   *History
	relays atomic.Int64 // relay slots created, for wire-counter namespaces
	// backlogs counts writeBacklog calls.
	backlogs atomic.Int64
	// clientOpts are the test's own NATS client options (TLS).
	clientOpts []natsgo.Option
	// ignore lists event ids finish leaves out of the check (bad rows a
	// test inserted on purpose and judges itself).
	ignore map[string]bool
	// dbURL and pgTarget are the database the scenario runs on: the test
	// database, or a private cluster the test may restart.
	dbURL    string
	pgTarget string
	// direct: relays connect with dbURL itself, not through their
	// PostgreSQL proxy (envOpts.dsn).
	direct bool
	// broker, when set, is the broker instead of the env's NATS server
	// (RabbitMQ, Redis): relays reach it through their broker proxy.
	broker *otherBroker
	// wal: the scenario's relays read the WAL (--source wal) from the
	// table's slot and publication (walSlot, walPublication).
	wal            bool
	walSlot        string
	walPublication string
	walStarted     time.Time // when the writers may have started
}

type envOpts struct {
	nats      natsOpts
	noNATS    bool
	dupWindow time.Duration // the stream's duplicate window; 0: the default (2m)
	natsCA    string        // CA file the test's NATS clients trust (a TLS server)
	// cluster, when set, is the database instead of the test database.
	cluster *pgCluster
	// dsn, with cluster, is the URL the scenario's pool, writers, outbox
	// commands and relays use instead of the cluster's own: a multi-host
	// URL listing the cluster and its standby (failoverDSN). Relays connect
	// with it directly: their PostgreSQL proxy reaches one server only.
	dsn string
	// dbURL, when set, is another database of the shared server (one of
	// another encoding) instead of the test database.
	dbURL string
	// wal prepares the table for the WAL source (outbox migrate --source
	// wal) and makes every relay of the scenario run with --source wal.
	wal bool
	// partitioned creates the table partitioned (outbox migrate --source
	// wal --partitioned); with wal.
	partitioned bool
}

// clusterPool is a pool on a private cluster's database, closed when the
// test ends.
func clusterPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctxT(t, 30*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{t: t, wire: newWireCounter(), hist: NewHistory(), ignore: map[string]bool{}, dbURL: testdb.URL(), pgTarget: pgAddr(t)}
	if o.cluster != nil {
		e.dbURL, e.pgTarget = o.cluster.url(), o.cluster.addr()
		if o.dsn != "" {
			e.dbURL, e.direct = o.dsn, true
		}
		e.schema = testdb.NewSchemaName("t")
		e.pool = clusterPool(t, e.dbURL)
		if _, err := e.pool.Exec(ctxT(t, 30*time.Second), "CREATE SCHEMA "+pgx.Identifier{e.schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	} else if o.dbURL != "" {
		e.dbURL = o.dbURL
		e.schema = testdb.NewSchemaName("t")
		e.pool = clusterPool(t, e.dbURL)
		if _, err := e.pool.Exec(ctxT(t, 30*time.Second), "CREATE SCHEMA "+pgx.Identifier{e.schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	} else {
		e.schema = testdb.Schema(t)
		e.pool = testdb.Pool(t, "")
	}
	if o.natsCA != "" {
		e.clientOpts = append(e.clientOpts, natsgo.RootCAs(o.natsCA))
	}
	e.table = pgx.Identifier{e.schema, "outbox_events"}.Sanitize()
	if _, err := outbox.Migrate(ctxT(t, 60*time.Second), e.pool, outbox.MigrateConfig{Schema: e.schema, Partitioned: o.partitioned}); err != nil {
		t.Fatal(err)
	}
	if o.wal {
		e.setupWAL(o.cluster != nil || o.dbURL != "", o.partitioned)
	}
	if !o.noNATS {
		e.nats = startNATS(t, o.nats)
		e.prefix = strings.ToUpper(strings.ReplaceAll(e.schema, "-", "_"))
		e.createStream(e.prefix, []string{e.prefix + ".>"}, o.dupWindow)
	}
	return e
}

func (e *env) natsConn() *natsgo.Conn {
	e.t.Helper()
	nc, err := natsgo.Connect(e.nats.url(), append([]natsgo.Option{natsgo.MaxReconnects(-1), natsgo.RetryOnFailedConnect(true)}, e.clientOpts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

func (e *env) createStream(name string, subjects []string, dupWindow time.Duration) {
	e.t.Helper()
	nc := e.natsConn()
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := js.CreateStream(ctxT(e.t, 30*time.Second), jetstream.StreamConfig{
		Name: name, Subjects: subjects, Storage: jetstream.FileStorage, Duplicates: dupWindow,
	}); err != nil {
		e.t.Fatalf("create stream %s: %v", name, err)
	}
}

// count counts the outbox rows matching where.
func (e *env) count(where string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctxT(e.t, 60*time.Second), `SELECT count(*) FROM `+e.table+` WHERE `+where).Scan(&n); err != nil {
		e.t.Fatalf("count %s: %v", where, err)
	}
	return n
}

func (e *env) pending() int { return e.count("processed_at IS NULL AND dead_at IS NULL") }

// attemptsBurned sums the attempts counted on the scenario's rows (the bad
// rows a test inserted on purpose and judges itself left out): what the
// faults cost in retries, delivered or not.
func (e *env) attemptsBurned() int {
	e.t.Helper()
	ignored := make([]string, 0, len(e.ignore))
	for id := range e.ignore {
		ignored = append(ignored, id)
	}
	var n int
	if err := e.pool.QueryRow(ctxT(e.t, 60*time.Second), `SELECT COALESCE(sum(attempts), 0) FROM `+e.table+
		` WHERE NOT (id::text = ANY($1::text[]))`, ignored).Scan(&n); err != nil {
		e.t.Fatalf("attempts burned: %v", err)
	}
	return n
}
func (e *env) dead() int { return e.count("dead_at IS NOT NULL AND processed_at IS NULL") }

// waitDrained waits until no row is pending and returns how long that took.
func (e *env) waitDrained(d time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if e.pending() == 0 {
			return time.Since(start), true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), false
}

// terminate ends the PostgreSQL sessions whose application_name starts with
// prefix and returns how many it ended.
func (e *env) terminate(prefix, extraWhere string) int {
	e.t.Helper()
	q := `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name LIKE $1 || '%' AND pid <> pg_backend_pid()`
	if extraWhere != "" {
		q += " AND " + extraWhere
	}
	var n int
	if err := e.pool.QueryRow(ctxT(e.t, 30*time.Second), q, prefix).Scan(&n); err != nil {
		e.t.Errorf("terminate %s: %v", prefix, err)
	}
	return n
}

// resolveAmbiguous decides which ambiguous events committed: those whose
// row is in the table, and those delivered. A relay only ever sees
// committed rows (the table's by visibility, the WAL source's from commit
// records), and the WAL source deletes the rows it delivered, so the table
// alone would count a delivered ambiguous event as rolled back.
func (e *env) resolveAmbiguous(delivered []Delivery) {
	e.t.Helper()
	ids := e.hist.Ambiguous()
	if len(ids) == 0 {
		return
	}
	rows, err := e.pool.Query(ctxT(e.t, 60*time.Second), `SELECT id::text FROM `+e.table+` WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		e.t.Fatal(err)
	}
	in := map[string]bool{}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { in[id] = true; return nil }); err != nil {
		e.t.Fatal(err)
	}
	for _, d := range delivered {
		in[d.ID] = true
	}
	e.hist.Resolve(in)
}

// ---------------------------------------------------------------------------
// The recording consumer

// readStream reads every message the stream holds, in stream order.
func (e *env) readStream(stream string) []Delivery {
	e.t.Helper()
	ctx := ctxT(e.t, 10*time.Minute)
	nc, err := natsgo.Connect(e.nats.url(), e.clientOpts...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		e.t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	last := info.State.LastSeq
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]Delivery, 0, info.State.Msgs)
	// A fetch can come back empty while the server pushes a message of
	// tens of MB to a loaded machine: stuck means several in a row.
	empty := 0
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			e.t.Fatalf("read stream %s: %v", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, toDelivery(md.Sequence.Stream, m.Headers(), m.Data()))
			if md.Sequence.Stream >= last {
				return out
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			e.t.Fatalf("read stream %s: %v", stream, err)
		}
		if got > 0 {
			empty = 0
			continue
		}
		if empty++; empty == 6 {
			e.t.Fatalf("read stream %s: stuck at %d of %d messages (6 fetches of 5 s came back empty)", stream, len(out), info.State.Msgs)
		}
	}
}

type payload struct {
	N   *int   `json:"n"`
	Agg string `json:"agg"`
}

func toDelivery(seq uint64, h natsgo.Header, data []byte) Delivery {
	d := Delivery{Seq: seq, ID: h.Get(outbox.HeaderEventID), Aggregate: h.Get(outbox.HeaderAggregateID), N: -1}
	var p payload
	if json.Unmarshal(data, &p) == nil && p.N != nil {
		d.N = *p.N
	}
	return d
}

// ---------------------------------------------------------------------------
// Publishes on the wire

// wireCounter counts, in the bytes relays send to the broker, every
// Nats-Msg-Id header: one per publish attempt, whatever the broker does with
// it.
type wireCounter struct {
	mu     sync.Mutex
	carry  map[int64][]byte
	counts map[string]int
	total  int
}

func newWireCounter() *wireCounter {
	return &wireCounter{carry: map[int64][]byte{}, counts: map[string]int{}}
}

var msgIDHeader = []byte("Nats-Msg-Id: ")

const uuidLen = 36

// hookFor returns a tcpproxy.Hook counting what crosses one proxy; it never
// changes the traffic. Connection ids are per proxy, hence ns.
func (w *wireCounter) hookFor(ns int64) tcpproxy.Hook {
	return func(conn int64, dir tcpproxy.Direction, b []byte) tcpproxy.Action {
		if dir == tcpproxy.ToServer {
			w.scan(ns<<32|conn, b)
		}
		return tcpproxy.Forward
	}
}

// scan counts the ids in chunk, continuing the connection's previous chunk.
func (w *wireCounter) scan(conn int64, chunk []byte) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	carry := w.carry[conn]
	buf := append(append([]byte(nil), carry...), chunk...)
	var found []string
	for i := 0; ; {
		j := bytes.Index(buf[i:], msgIDHeader)
		if j < 0 {
			break
		}
		start := i + j + len(msgIDHeader)
		if start+uuidLen > len(buf) {
			break // completed by the next chunk
		}
		if start+uuidLen > len(carry) { // not counted with the previous chunk
			id := string(buf[start : start+uuidLen])
			w.counts[id]++
			w.total++
			found = append(found, id)
		}
		i = start + uuidLen
	}
	keep := len(msgIDHeader) + uuidLen
	if len(buf) > keep {
		buf = buf[len(buf)-keep:]
	}
	w.carry[conn] = buf
	return found
}

// sent is the number of publishes so far.
func (w *wireCounter) sent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// resent is the number of publishes beyond the first of each event.
func (w *wireCounter) resent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.counts {
		n += c - 1
	}
	return n
}

// ---------------------------------------------------------------------------
// Writers

// workload runs writers: each owns a set of aggregates and writes their
// events in order, a few per transaction, through outbox.Writer in real
// transactions, and records every outcome in the history.
type workload struct {
	e            *env
	pool         *pgxpool.Pool // the writers' pool (direct, or through a proxy)
	writers      int
	aggregates   int // per writer
	maxPerTx     int
	rollbackPct  int
	pause        time.Duration // between a writer's transactions
	eventType    string
	notifier     *outbox.Notifier
	onCommit     func(ids []string, at time.Time)
	lateEvery    int           // every lateEvery-th transaction commits late
	lateHold     time.Duration // how long a late transaction waits before COMMIT
	payloadBytes int           // pad payloads to about this size

	w        *outbox.Writer
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	txs      atomic.Int64
	errs     atomic.Int64
	firstErr atomic.Pointer[string]
}

func (e *env) startWriters(w *workload) *workload {
	e.t.Helper()
	w.e = e
	if w.pool == nil {
		w.pool = e.pool
	}
	if w.writers == 0 {
		w.writers = 4
	}
	if w.aggregates == 0 {
		w.aggregates = 25
	}
	if w.maxPerTx == 0 {
		w.maxPerTx = 5
	}
	if w.eventType == "" {
		w.eventType = "ev"
	}
	var err error
	if w.w, err = outbox.NewWriter(outbox.WriterConfig{Schema: e.schema}); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	for i := range w.writers {
		w.wg.Go(func() { w.run(ctx, i) })
	}
	e.t.Cleanup(w.stop)
	return w
}

// stop stops the writers and waits for their transactions to end.
func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *workload) run(ctx context.Context, id int) {
	rnd := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	next := make([]int, w.aggregates)
	for tx := 0; ctx.Err() == nil; tx++ {
		n := 1 + rnd.IntN(w.maxPerTx)
		evs := make([]outbox.Event, n)
		rec := make([]Written, n)
		for i := range evs {
			a := rnd.IntN(w.aggregates)
			agg := fmt.Sprintf("w%d-a%d", id, a)
			seq := next[a]
			next[a]++ // whatever the outcome: rolled back events leave gaps
			body := fmt.Sprintf(`{"n":%d,"agg":%q`, seq, agg)
			if w.payloadBytes > len(body)+10 {
				body += `,"pad":"` + strings.Repeat("x", w.payloadBytes-len(body)-10) + `"`
			}
			body += "}"
			evID := uuid.Must(uuid.NewV7())
			evs[i] = outbox.Event{ID: evID, AggregateType: "acct", AggregateID: agg, EventType: w.eventType, Payload: []byte(body)}
			rec[i] = Written{ID: evID.String(), Aggregate: agg, N: seq}
		}
		rollback := rnd.IntN(100) < w.rollbackPct
		var hold time.Duration
		if w.lateEvery > 0 && tx%w.lateEvery == w.lateEvery-1 {
			hold = w.lateHold
		}
		w.txs.Add(1)
		outcome, err := w.writeTx(ctx, evs, rollback, hold)
		if err != nil {
			w.errs.Add(1)
			msg := err.Error()
			w.firstErr.CompareAndSwap(nil, &msg)
		}
		w.e.hist.Record(outcome, rec...)
		if outcome == Committed {
			if w.onCommit != nil {
				ids := make([]string, len(rec))
				for i := range rec {
					ids[i] = rec[i].ID
				}
				w.onCommit(ids, time.Now())
			}
			if w.notifier != nil {
				w.notifier.Notify()
			}
		}
		if w.pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(w.pause):
			}
		}
	}
}

// writeTx writes evs in one transaction and tells what is known of the
// outcome. Only COMMIT's failure is ambiguous: any failure before it means
// the transaction cannot have committed.
func (w *workload) writeTx(ctx context.Context, evs []outbox.Event, rollback bool, hold time.Duration) (Outcome, error) {
	// The writer's own deadline: a partitioned database must not hang it,
	// and stopping the workload lets the transaction in flight finish.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second+hold)
	defer cancel()
	tx, err := w.pool.Begin(tctx)
	if err != nil {
		return RolledBack, err
	}
	defer tx.Rollback(context.Background())
	if _, err := w.w.Write(tctx, tx, evs...); err != nil {
		return RolledBack, err
	}
	if rollback {
		return RolledBack, tx.Rollback(tctx)
	}
	if hold > 0 {
		time.Sleep(hold)
	}
	err = tx.Commit(tctx)
	switch {
	case err == nil:
		return Committed, nil
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return RolledBack, err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
		return RolledBack, err // the server answered: the transaction is gone
	}
	return Ambiguous, err
}

// writeBacklog writes n events fast, many per transaction, through the
// Writer, and records them as committed.
func (e *env) writeBacklog(n, perTx, aggregates, conns int) {
	e.t.Helper()
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: e.schema})
	if err != nil {
		e.t.Fatal(err)
	}
	call := e.backlogs.Add(1) // each backlog's aggregates are its own
	var wg sync.WaitGroup
	jobs := make(chan int)
	var failed atomic.Pointer[error]
	for range conns {
		wg.Go(func() {
			for start := range jobs {
				cnt := min(perTx, n-start)
				evs := make([]outbox.Event, cnt)
				rec := make([]Written, cnt)
				for i := range evs {
					k := (start + i) % aggregates
					agg := fmt.Sprintf("b%d-a%d", call, k)
					seq := (start + i) / aggregates
					id := uuid.Must(uuid.NewV7())
					evs[i] = outbox.Event{ID: id, AggregateType: "acct", AggregateID: agg, EventType: "ev",
						Payload: fmt.Appendf(nil, `{"n":%d,"agg":%q}`, seq, agg)}
					rec[i] = Written{ID: id.String(), Aggregate: agg, N: seq}
				}
				err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
					_, err := w.Write(context.Background(), tx, evs...)
					return err
				})
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					continue
				}
				e.hist.Record(Committed, rec...)
			}
		})
	}
	for start := 0; start < n; start += perTx {
		jobs <- start
	}
	close(jobs)
	wg.Wait()
	if p := failed.Load(); p != nil {
		e.t.Fatalf("backlog: %v", *p)
	}
}

// ---------------------------------------------------------------------------
// Checking and reporting

// finish resolves ambiguous writes, reads the stream, runs the checker,
// records the row in the report and fails the test on lost, unexpected,
// corrupted or (ordered) reordered events.
func (e *env) finish(row Row) Result {
	e.t.Helper()
	var all []Delivery
	if e.broker != nil {
		all = e.broker.read(e.t)
	} else {
		all = e.readStream(e.prefix)
	}
	e.resolveAmbiguous(all)
	var ds []Delivery
	for _, d := range all {
		if !e.ignore[d.ID] {
			ds = append(ds, d)
		}
	}
	res := Check(e.hist, ds)
	row.Result = res
	row.DeadLetters = e.dead()
	row.AttemptsBurned, row.AttemptsMeasured = e.attemptsBurned(), true
	if b := row.Bound; b != nil {
		resent := fmt.Sprintf("resent ≤ %d", b.Resent)
		if row.Resent < 0 {
			resent = "resent not measured"
		}
		row.Details = append(row.Details, fmt.Sprintf("asserted: lost 0, attempts burned ≤ %d, %s, duplicates delivered ≤ %d, dead letters ≤ %d",
			b.Attempts, resent, b.Duplicated, b.DeadLetters))
		if row.AttemptsBurned > b.Attempts {
			e.t.Errorf("%d attempts burned, bound %d", row.AttemptsBurned, b.Attempts)
		}
		if row.Resent >= 0 && row.Resent > b.Resent {
			e.t.Errorf("%d publishes resent, bound %d", row.Resent, b.Resent)
		}
		if res.Duplicated > b.Duplicated {
			e.t.Errorf("%d duplicate deliveries, bound %d", res.Duplicated, b.Duplicated)
		}
		if row.DeadLetters > b.DeadLetters {
			e.t.Errorf("%d dead letters, bound %d", row.DeadLetters, b.DeadLetters)
		}
	}
	row.Passed = res.OK(row.Ordered) && !e.t.Failed() && row.KnownBug == ""
	report.row(row)
	e.t.Logf("%s: committed=%d ambiguous=%d (committed %d) rolled back=%d stored=%d delivered=%d lost=%d unexpected=%d unknown=%d corrupted=%d duplicated=%d (events %d) resent=%d inversions=%d dead=%d drain=%s",
		row.Scenario, res.Committed, res.Ambiguous, res.AmbiguousCommitted, res.RolledBack, res.Stored, res.Delivered,
		len(res.Lost), len(res.Unexpected), len(res.Unknown), res.Corrupted, res.Duplicated, res.DupEvents, row.Resent,
		res.Inversions, row.DeadLetters, row.Drain)
	for _, d := range row.Details {
		e.t.Log("  " + d)
	}
	if len(res.Lost) > 0 {
		e.t.Errorf("%d events lost, e.g. %v", len(res.Lost), res.Lost[:min(5, len(res.Lost))])
	}
	if len(res.Unexpected) > 0 {
		e.t.Errorf("%d rolled-back events delivered, e.g. %v", len(res.Unexpected), res.Unexpected[:min(5, len(res.Unexpected))])
	}
	if len(res.Unknown) > 0 || res.Corrupted > 0 {
		e.t.Errorf("%d unknown and %d corrupted messages in the stream", len(res.Unknown), res.Corrupted)
	}
	// Inversions of a scenario reproducing a known bug are reported by it
	// (knownBug), not failed here.
	if row.Ordered && res.Inversions > 0 && row.KnownBug == "" {
		e.t.Errorf("%d per-aggregate inversions in ordered mode: %v", res.Inversions, res.InversionExamples)
	}
	if res.Committed == 0 {
		e.t.Error("no event committed: the scenario tested nothing")
	}
	return res
}

// dumpStuck logs, for a few aggregates that still have held events, every
// unprocessed row of the aggregate in seq order with its holder: what a
// scenario that did not drain left behind.
func (e *env) dumpStuck() {
	e.t.Helper()
	ctx := ctxT(e.t, 30*time.Second)
	rows, err := e.pool.Query(ctx, `SELECT aggregate_type, aggregate_id, id, seq, attempts, retry_after IS NOT NULL, dead_at IS NOT NULL,
       COALESCE(held_by::text, ''), COALESCE(left(last_error, 60), '')
FROM `+e.table+` AS o
WHERE processed_at IS NULL AND (aggregate_type, aggregate_id) IN (
    SELECT aggregate_type, aggregate_id FROM `+e.table+` WHERE processed_at IS NULL AND dead_at IS NOT NULL LIMIT 3)
ORDER BY aggregate_type, aggregate_id, seq`)
	if err != nil {
		e.t.Logf("dump stuck rows: %v", err)
		return
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var typ, agg, id, held, lastErr string
		var seq int64
		var attempts int
		var retry, dead bool
		if err := rows.Scan(&typ, &agg, &id, &seq, &attempts, &retry, &dead, &held, &lastErr); err != nil {
			e.t.Logf("dump stuck rows: %v", err)
			return
		}
		if n++; n > 60 {
			continue
		}
		e.t.Logf("stuck %s/%s id=%s seq=%d attempts=%d handed=%v dead=%v held_by=%s err=%q", typ, agg, id, seq, attempts, retry, dead, held, lastErr)
	}
	e.t.Logf("stuck: %d unprocessed rows in the aggregates shown", n)
}
