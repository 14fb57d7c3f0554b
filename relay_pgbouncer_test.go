package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
)

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

// writers are the four ways of writing events, each committing two events
// per call in a transaction of its own: Write, Queue, WriteSQL, and the
// reference design's plain INSERT.
func (b *bouncerEnv) writers(pool *pgxpool.Pool, tag string) []namedWriter {
	db := stdlib.OpenDBFromPool(pool)
	b.t.Cleanup(func() { db.Close() })
	agg := func(kind string, w int) string { return fmt.Sprintf("%s-%s%d", tag, kind, w) }
	return []namedWriter{
		{"Write", func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := b.writer.Write(ctx, tx, event(agg("w", w), i), event(agg("w", w), i))
				return err
			})
		}},
		{"Queue", func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				batch := &pgx.Batch{}
				if _, err := b.writer.Queue(ctx, batch, event(agg("q", w), i), event(agg("q", w), i)); err != nil {
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
			if _, err := b.writer.WriteSQL(ctx, tx, event(agg("s", w), i), event(agg("s", w), i)); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
		{"INSERT", func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for range 2 {
					_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{b.schema, "outbox_events"}.Sanitize()+
						` (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4)`,
						"order", agg("i", w), "order.created", fmt.Sprintf(`{"n":%d}`, i))
					if err != nil {
						return err
					}
				}
				return nil
			})
		}},
	}
}

type namedWriter struct {
	name  string
	write func(ctx context.Context, w, i int) error
}

// Every way of writing works through PgBouncer in transaction mode with
// every pgx exec mode that does not rely on named prepared statements,
// from more clients than PgBouncer has server connections.
func TestPgBouncerWriters(t *testing.T) {
	b := setupBouncer(t)
	const workers, per = 2 * testdb.PgBouncerPoolSize, 5
	want := 0
	for _, mode := range []string{"cache_describe", "describe_exec", "exec", "simple_protocol"} {
		for _, wr := range b.writers(b.bouncerPool(mode), mode) {
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

// pgx's default mode caches named prepared statements, which PgBouncer
// 1.18 in transaction mode leaves on server connections other clients get:
// Write and WriteSQL then fail with an error that names the fix.
func TestPgBouncerWritersStatementCache(t *testing.T) {
	b := setupBouncer(t)
	const workers, per = 2 * testdb.PgBouncerPoolSize, 5
	for _, wr := range b.writers(b.bouncerPool(""), "default")[:3] {
		if wr.name == "Queue" {
			continue // pgx prepares a batch's statements itself: its error is pgx's
		}
		c := ctx(t)
		err := concurrently(workers, per, func(w, i int) error { return wr.write(c, w, i) })
		if err == nil {
			t.Logf("%s: no statement cache clash in %d transactions", wr.name, workers*per)
			continue
		}
		if !strings.Contains(err.Error(), "add default_query_exec_mode=cache_describe to the connection string") {
			t.Errorf("%s: %v; want the error to name default_query_exec_mode", wr.name, err)
		}
	}
}

// relayThroughBouncer writes n events, runs a relay on pool with cfg
// (Schema filled in) until each was delivered, and checks what a user
// would: every row processed, attempts counting the one refused try of
// every fifth event, no event delivered twice, nothing logged at ERROR. It
// returns the WARN and ERROR lines.
func (b *bouncerEnv) relayThroughBouncer(pool *pgxpool.Pool, cfg outbox.RelayConfig, n int) string {
	t := b.t
	t.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("o-%d", i%37), i)
	}
	if err := pgx.BeginFunc(ctx(t), b.bouncerPool("exec"), func(tx pgx.Tx) error {
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
	pub.FailWith(func(m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if nth(m.Payload)%5 == 0 && !tried[m.ID.String()] {
			tried[m.ID.String()] = true
			return errors.New("first try refused")
		}
		return nil
	})
	logs := &syncBuffer{}
	cfg.Schema = b.schema
	cfg.BatchSize = 50
	cfg.RetryBackoff = outbox.Backoff{Base: time.Millisecond, Max: time.Millisecond}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := outbox.NewRelay(pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := b.run(r)
	if err := pub.WaitDistinct(ctx(t), n); err != nil {
		t.Fatalf("%d of %d delivered: %v\nlogs:\n%s", pub.Distinct(), n, err, errorLines(logs.String()))
	}
	stop()
	if got := b.count("processed_at IS NOT NULL"); got != n {
		t.Errorf("%d of %d rows processed", got, n)
	}
	if got, want := b.count("attempts = 1"), (n+4)/5; got != want {
		t.Errorf("%d rows with attempts = 1, want %d (each refused once)", got, want)
	}
	if got := b.count("attempts NOT IN (0, 1)"); got != 0 {
		t.Errorf("%d rows with attempts other than 0 or 1", got)
	}
	for id, c := range pub.Count() {
		if c > 1 {
			t.Errorf("event %s delivered %d times", id, c)
		}
	}
	if e := errorLines(logs.String()); e != "" {
		t.Errorf("the relay logged errors:\n%s", e)
	}
	return logs.String()
}

// errorLines are the ERROR lines of a text log.
func errorLines(logs string) string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The table-source relay delivers everything through PgBouncer in
// transaction mode with the exec modes pgx documents for poolers, in both
// claim orders, with failed publishes counted in attempts and nothing
// logged at ERROR.
func TestPgBouncerRelay(t *testing.T) {
	for _, c := range []struct {
		mode    string
		ordered bool
	}{
		{"cache_describe", false},
		{"cache_describe", true},
		{"exec", false},
		{"exec", true},
		{"simple_protocol", false},
	} {
		name := c.mode
		if c.ordered {
			name += "/ordered"
		}
		t.Run(name, func(t *testing.T) {
			b := setupBouncer(t)
			logs := b.relayThroughBouncer(b.bouncerPool(c.mode), outbox.RelayConfig{Ordered: c.ordered}, 300)
			if strings.Contains(logs, "connection pooler") {
				t.Errorf("a warning about the pooler for a mode that works behind it:\n%s", logs)
			}
		})
	}
}

// runStarted runs a relay on pool until it has delivered one event, so
// past its start checks, then stops it.
func (b *bouncerEnv) runStarted(pool *pgxpool.Pool, cfg outbox.RelayConfig) {
	b.t.Helper()
	b.write(1)
	pub := memory.New()
	cfg.Schema = b.schema
	r, err := outbox.NewRelay(pool, pub, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	stop := b.run(r)
	if err := pub.WaitDistinct(ctx(b.t), 1); err != nil {
		b.t.Fatalf("nothing delivered: %v", err)
	}
	stop()
}

// With pgx's default mode, whose statement cache PgBouncer 1.18 in
// transaction mode breaks, and with describe_exec, the relay says at start,
// in one line, what to put in the connection string. A direct connection
// gets no such line.
func TestPgBouncerRelayModeWarnings(t *testing.T) {
	b := setupBouncer(t)
	for _, c := range []struct {
		name, mode, want string
		pool             *pgxpool.Pool
	}{
		{"default through PgBouncer", "", "add default_query_exec_mode=cache_describe to the connection string", nil},
		{"describe_exec through PgBouncer", "describe_exec", "use default_query_exec_mode=cache_describe", nil},
		{"default direct", "", "", b.pool},
	} {
		pool := c.pool
		if pool == nil {
			pool = b.bouncerPool(c.mode)
		}
		logs := &syncBuffer{}
		b.runStarted(pool, outbox.RelayConfig{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		got := logs.String()
		lines := strings.Count(got, "connection pooler")
		switch {
		case c.want == "" && lines != 0:
			t.Errorf("%s: warned about a pooler:\n%s", c.name, got)
		case c.want != "" && (lines != 1 || !strings.Contains(got, c.want)):
			t.Errorf("%s: want one line saying %q, got:\n%s", c.name, c.want, got)
		}
	}
}

// Behind PgBouncer in transaction mode LISTEN reaches nobody: the relay
// says so at start, in one line naming the fix, and delivers by polling.
// Directly, the same relay has no such line.
func TestPgBouncerRelayListen(t *testing.T) {
	b := setupBouncer(t)
	logs := b.relayThroughBouncer(b.bouncerPool("cache_describe"), outbox.RelayConfig{Listen: true}, 50)
	if n := strings.Count(logs, "LISTEN does not reach"); n != 1 || !strings.Contains(logs, "set DirectConnConfig (outbox relay --direct-url) to PostgreSQL itself") {
		t.Errorf("want one line saying LISTEN does not reach the relay and how to fix it, got:\n%s", logs)
	}

	direct := &syncBuffer{}
	b.runStarted(b.pool, outbox.RelayConfig{Listen: true, Logger: slog.New(slog.NewTextHandler(direct, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if strings.Contains(direct.String(), "LISTEN") {
		t.Errorf("a direct relay warned about LISTEN:\n%s", direct.String())
	}
}

// walBouncerPool is a pool on e's server through a PgBouncer of its own in
// transaction mode, with cache_describe; closed when the test ends.
func walBouncerPool(t *testing.T, e *env) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.srv.PgBouncer(t).URL() + "&default_query_exec_mode=cache_describe")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The WAL source through PgBouncer is refused at start with one error
// saying replication needs a direct connection, instead of retrying the
// replication connection forever.
func TestPgBouncerRelayWAL(t *testing.T) {
	e, _ := setupWAL(t)
	pool := walBouncerPool(t, e)
	r, err := outbox.NewRelay(pool, memory.New(), walConfig(outbox.RelayConfig{Schema: e.schema}))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(ctx(t))
	if !errors.Is(err, outbox.ErrReplicationPrerequisite) || !strings.Contains(err.Error(), "replication needs a direct connection to PostgreSQL") ||
		!strings.Contains(err.Error(), "unsupported startup parameter: replication") {
		t.Fatalf("Run = %v; want ErrReplicationPrerequisite saying replication needs a direct connection, with PgBouncer's reason", err)
	}
}

// directConfig is the connection config of e's server itself, for
// RelayConfig.DirectConnConfig.
func directConfig(t *testing.T, e *env) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(e.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// With DirectConnConfig, a relay whose pool goes through PgBouncer in
// transaction mode LISTENs on PostgreSQL itself: no warning, and an event
// is relayed on its notification although the poll interval is an hour.
func TestPgBouncerRelayListenDirect(t *testing.T) {
	b := setupBouncer(t)
	logs := &syncBuffer{}
	pool := b.bouncerPool("cache_describe")
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: b.schema, Listen: true, PollInterval: time.Hour, Workers: 1,
		DirectConnConfig: directConfig(t, b.env), Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	b.run(r)
	n, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	waitListening(t, b.env)
	for i := range 3 {
		ids := b.write(1)
		n.Notify()
		if err := waitRelayed(t, pub, ids[0], 20*time.Second); err != nil {
			t.Fatalf("event %d not relayed after Notify (poll interval 1h, LISTEN on the direct connection): %v\nlogs:\n%s", i, err, logs.String())
		}
	}
	if strings.Contains(logs.String(), "LISTEN") || strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("warned although LISTEN has a direct connection:\n%s", logs.String())
	}
}

// With DirectConnConfig, the WAL source works with its pool behind
// PgBouncer: it streams on the direct connection, delivers everything, and
// deletes what it delivered.
func TestPgBouncerRelayWALDirect(t *testing.T) {
	e, _ := setupWAL(t)
	pool := walBouncerPool(t, e)
	logs := &syncBuffer{}
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, walConfig(outbox.RelayConfig{Schema: e.schema, DirectConnConfig: directConfig(t, e),
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}))
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	waitStreaming(t, r, 30*time.Second)
	e.write(100)
	if err := pub.WaitDistinct(ctx(t), 100); err != nil {
		t.Fatalf("%d of 100 delivered: %v\nlogs:\n%s", pub.Distinct(), err, logs.String())
	}
	e.waitRowsGone(t, 10*time.Second)
	if !r.SourceStatus().Streaming {
		t.Errorf("not streaming at the end: %+v", r.SourceStatus())
	}
	if el := errorLines(logs.String()); el != "" {
		t.Errorf("the relay logged errors:\n%s", el)
	}
}

// nth is the "n" of a test event's payload.
func nth(payload []byte) int {
	var n int
	i := strings.Index(string(payload), `"n":`)
	if i < 0 {
		return -1
	}
	fmt.Sscanf(string(payload[i+4:]), "%d", &n)
	return n
}

// SetupReplication and DropReplication hold a session advisory lock: through
// PgBouncer they refuse, naming the fix, before touching anything.
func TestPgBouncerReplicationSetup(t *testing.T) {
	b := setupBouncer(t)
	pool := b.bouncerPool("cache_describe")
	_, err := outbox.SetupReplication(ctx(t), pool, outbox.MigrateConfig{Schema: b.schema})
	if err == nil || !strings.Contains(err.Error(), "SetupReplication (outbox migrate --source wal) needs a direct connection to PostgreSQL") {
		t.Errorf("SetupReplication through PgBouncer = %v; want it refused, naming a direct connection", err)
	}
	err = outbox.DropReplication(ctx(t), pool, outbox.MigrateConfig{Schema: b.schema})
	if err == nil || !strings.Contains(err.Error(), "DropReplication (outbox migrate drop-wal) needs a direct connection to PostgreSQL") {
		t.Errorf("DropReplication through PgBouncer = %v; want it refused, naming a direct connection", err)
	}
}

// Admin's calls that take event ids work in every exec mode a pooler
// needs (exec and simple_protocol send parameters without asking the
// server their types).
func TestPgBouncerAdmin(t *testing.T) {
	b := setupBouncer(t)
	for _, mode := range []string{"cache_describe", "exec", "simple_protocol"} {
		ids := b.write(4)
		if _, err := b.pool.Exec(ctx(t), `UPDATE outbox_events SET dead_at = now(), attempts = 10 WHERE id = $1`, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(ctx(t), `UPDATE outbox_events SET processed_at = now() WHERE id = $1`, ids[3]); err != nil {
			t.Fatal(err)
		}
		a, err := admin.New(b.bouncerPool(mode), admin.Config{Schema: b.schema})
		if err != nil {
			t.Fatal(err)
		}
		c := ctx(t)
		fail := func(what string, err error) {
			if err != nil {
				t.Errorf("%s with default_query_exec_mode=%s through PgBouncer: %v", what, mode, err)
			}
		}
		_, err = a.Status(c)
		fail("Status", err)
		_, err = a.DeadLetters(c, admin.DeadLetterFilter{})
		fail("DeadLetters", err)
		evs, err := a.Events(c, ids...)
		fail("Events", err)
		if err == nil && len(evs) != 4 {
			t.Errorf("Events (%s): %d events, want 4", mode, len(evs))
		}
		_, err = a.Unprocessed(c, ids)
		fail("Unprocessed", err)
		n, err := a.Retry(c, admin.RetrySelector{IDs: ids[:1]})
		fail("Retry", err)
		if err == nil && n != 1 {
			t.Errorf("Retry (%s): %d re-queued, want 1", mode, n)
		}
		_, err = a.Cancel(c, ids[1])
		fail("Cancel", err)
		rep, err := a.Replay(c, admin.ReplaySelector{Mode: admin.ReplayNewID, IDs: ids[3:]})
		fail("Replay", err)
		_, err = a.ReplayList(c, 10)
		fail("ReplayList", err)
		if err == nil {
			_, err = a.ReplayCancel(c, rep.ID)
			fail("ReplayCancel", err)
		}
	}
}
