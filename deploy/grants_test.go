package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
)

// grantBlocks returns the SQL blocks of docs/OPERATING.md that follow a
// "<!-- grants: NAME -->" marker: the GRANTs the documentation recommends,
// for schema app and roles outbox_app and outbox_relay.
func grantBlocks(t *testing.T) map[string]string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- grants: (\\w+) -->\\s*```sql\\n(.*?)```")
	blocks := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(readFile(t, "../docs/OPERATING.md")), -1) {
		blocks[m[1]] = m[2]
	}
	return blocks
}

func TestLeastPrivilegeGrants(t *testing.T) {
	t.Parallel()
	blocks := grantBlocks(t)
	for _, name := range []string{"table", "columns"} {
		sql, ok := blocks[name]
		if !ok {
			t.Fatalf("docs/OPERATING.md: no <!-- grants: %s --> SQL block", name)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testGrants(t, sql, name == "columns")
		})
	}
}

// testGrants applies the documented GRANTs to two fresh roles on a freshly
// migrated schema, then does everything the application and the relay do,
// each as its own role, and checks that each role can do nothing more.
func testGrants(t *testing.T, grants string, columns bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema := testdb.Schema(t)
	owner := testdb.Pool(t, "")
	if _, err := outbox.Migrate(ctx, owner, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	suffix := strings.TrimPrefix(schema, "t_")
	appRole, relayRole := "pgoutbox_app_"+suffix, "pgoutbox_relay_"+suffix
	password := randomHex(t)
	createRole(t, owner, appRole, password)
	createRole(t, owner, relayRole, password)

	qs := pgx.Identifier{schema}.Sanitize()
	sql := regexp.MustCompile(`\bapp\b`).ReplaceAllString(grants, qs)
	sql = regexp.MustCompile(`\boutbox_app\b`).ReplaceAllString(sql, pgx.Identifier{appRole}.Sanitize())
	sql = regexp.MustCompile(`\boutbox_relay\b`).ReplaceAllString(sql, pgx.Identifier{relayRole}.Sanitize())
	if _, err := owner.Exec(ctx, sql); err != nil {
		t.Fatalf("the documented GRANTs fail: %v\n%s", err, sql)
	}
	app := poolAs(t, appRole, password)
	relay := poolAs(t, relayRole, password)
	table := qs + ".outbox_events"

	// The application writes events with the Writer, and with a
	// plain INSERT, and wakes relays with a Notifier.
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	write := func(events ...outbox.Event) {
		t.Helper()
		err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			_, err := w.Write(ctx, tx, events...)
			return err
		})
		if err != nil {
			t.Fatalf("application role: Write: %v", err)
		}
	}
	ev := func(typ, agg string) outbox.Event {
		return outbox.Event{AggregateType: "order", AggregateID: agg, EventType: typ, Payload: []byte(`{"total":42}`),
			Headers: map[string]string{"tenant": "acme"}}
	}
	write(ev("order.created", "1"), ev("order.paid", "1"), ev("order.failed", "2"))
	if _, err := app.Exec(ctx, `INSERT INTO `+table+` (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '3', 'order.created', '{"total": 7}')`); err != nil {
		t.Fatalf("application role: a plain INSERT: %v", err)
	}
	notifier, err := outbox.NewNotifier(app, outbox.NotifierConfig{Schema: schema, Logger: failOnLog(t, slog.LevelDebug)})
	if err != nil {
		t.Fatal(err)
	}
	notifier.Notify()
	notifier.Close()

	// The relay claims, publishes and marks; a failure is recorded and
	// dead-letters the event (MaxAttempts 1).
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.EventType == "order.failed" {
			return errors.New("consumer rejected the event")
		}
		return nil
	})
	r, err := outbox.NewRelay(relay, pub, outbox.RelayConfig{Schema: schema, MaxAttempts: 1, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckSchema(ctx); err != nil {
		t.Fatalf("relay role: CheckSchema: %v", err)
	}
	res, err := r.ProcessBatch(ctx)
	if err != nil || res.Published != 3 || res.DeadLettered != 1 {
		t.Fatalf("relay role: ProcessBatch = %+v, %v; want 3 published, 1 dead letter", res, err)
	}

	// The operator's commands, with the relay's role.
	adm, err := admin.New(relay, admin.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := adm.Status(ctx); err != nil {
		t.Fatalf("relay role: Status: %v", err)
	} else if st.DeadLetters != 1 || st.PublishedLastMinute != 3 {
		t.Fatalf("relay role: Status shows %d dead letters and %d published; want 1 and 3", st.DeadLetters, st.PublishedLastMinute)
	}
	if dl, err := adm.DeadLetters(ctx, admin.DeadLetterFilter{}); err != nil || len(dl) != 1 {
		t.Fatalf("relay role: DeadLetters = %d, %v; want 1", len(dl), err)
	}
	pub.FailWith(nil)
	if n, err := adm.Retry(ctx, admin.RetrySelector{All: true}); err != nil || n != 1 {
		t.Fatalf("relay role: Retry = %d, %v; want 1", n, err)
	}
	// The re-queued row is below the claims' floor: the next rescan (one
	// claim per RescanInterval) publishes it.
	for deadline := time.Now().Add(3 * outbox.DefaultRescanInterval); ; {
		res, err := r.ProcessBatch(ctx)
		if err == nil && res.Published == 1 {
			break
		}
		if err != nil || res.Claimed != 0 || time.Now().After(deadline) {
			t.Fatalf("relay role: ProcessBatch after retry = %+v, %v; want 1 published within %s", res, err, 3*outbox.DefaultRescanInterval)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := adm.Cleanup(ctx, 0, 100, nil); err != nil || n != 4 {
		t.Fatalf("relay role: Cleanup = %d, %v; want 4 deleted", n, err)
	}

	// DeleteOnPublish deletes instead of marking.
	write(ev("order.shipped", "4"))
	rd, err := outbox.NewRelay(relay, pub, outbox.RelayConfig{Schema: schema, DeleteOnPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := rd.ProcessBatch(ctx); err != nil || res.Published != 1 {
		t.Fatalf("relay role: ProcessBatch with DeleteOnPublish = %+v, %v; want 1 published", res, err)
	}
	if n := countRows(t, owner, table); n != 0 {
		t.Fatalf("%d rows left after DeleteOnPublish and cleanup; want 0", n)
	}

	// Run: ordered claims, LISTEN, the gauges and the cleanup loop, all as
	// the relay role; any warning (a failed gauge refresh, cleanup or
	// LISTEN) fails the test.
	reg := prometheus.NewRegistry()
	pubRun := memory.New()
	rr, err := outbox.NewRelay(relay, pubRun, outbox.RelayConfig{
		Schema: schema, Ordered: true, Listen: true, Registerer: reg, Logger: failOnLog(t, slog.LevelWarn),
		PollInterval: 10 * time.Millisecond, StatsInterval: 10 * time.Millisecond,
		Retention: time.Millisecond, CleanupInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- rr.Run(runCtx) }()
	write(ev("order.created", "5"), ev("order.paid", "5"))
	if err := pubRun.WaitDistinct(ctx, 2); err != nil {
		t.Fatalf("relay role: Run published %d of 2 events: %v", pubRun.Distinct(), err)
	}
	eventually(t, ctx, "the cleanup loop deletes the published rows", func() bool { return countRows(t, owner, table) == 0 })
	stop()
	if err := <-runErr; err != nil {
		t.Fatalf("relay role: Run: %v", err)
	}

	// Neither role can do more than its job.
	denied := func(pool *pgxpool.Pool, role, sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s: %s: err = %v, want insufficient_privilege (42501)", role, sql, err)
		}
	}
	ddl := []string{
		`CREATE TABLE ` + qs + `.sneaky (id int)`,
		`ALTER TABLE ` + table + ` ADD COLUMN sneaky int`,
		`DROP TABLE ` + table,
		`TRUNCATE ` + table,
		`SELECT * FROM ` + qs + `.pgoutbox_migrations`,
	}
	for _, sql := range append(ddl,
		`SELECT count(*) FROM `+table,
		`UPDATE `+table+` SET attempts = 0`,
		`DELETE FROM `+table,
	) {
		denied(app, "application role", sql)
	}
	for _, sql := range append(ddl,
		`INSERT INTO `+table+` (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', 'b', 'c', '{}')`,
	) {
		denied(relay, "relay role", sql)
	}
	if columns {
		denied(relay, "relay role", `UPDATE `+table+` SET payload = '{}'`)
		denied(relay, "relay role", `UPDATE `+table+` SET event_type = 'x'`)
		denied(app, "application role", `INSERT INTO `+table+` (aggregate_type, aggregate_id, event_type, payload, processed_at) VALUES ('a', 'b', 'c', '{}', now())`)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// createRole creates a login role, dropped (with its privileges) when the
// test ends. Roles are cluster-wide: the caller makes the name unique.
func createRole(t *testing.T, owner *pgxpool.Pool, name, password string) {
	t.Helper()
	q := pgx.Identifier{name}.Sanitize()
	if _, err := owner.Exec(context.Background(), fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", q, password)); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := owner.Exec(context.Background(), "DROP OWNED BY "+q+"; DROP ROLE "+q); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
}

// poolAs connects to the test database as role; the pool is closed before
// the role is dropped.
func poolAs(t *testing.T, role, password string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, password
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond until it holds or ctx ends.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-tick.C:
		}
	}
}

// failOnLog returns a logger that fails the test on any record at level or
// above: a permission error surfaces in the relay's logs, not its results.
func failOnLog(t *testing.T, level slog.Level) *slog.Logger {
	return slog.New(&testHandler{t: t, level: level, mu: &sync.Mutex{}})
}

type testHandler struct {
	t     *testing.T
	level slog.Level
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *testHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *testHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t.Errorf("log %s: %s", r.Level, b.String())
	return nil
}

func (h *testHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *testHandler) WithGroup(string) slog.Handler { return h }
