package deploy

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/cmd/outbox/outboxcli"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/wal"
)

// TestRoles gives each role of docs/OPERATING.md's "Database roles" exactly
// its documented block, in a schema of its own, none of them a superuser,
// and runs its job with the outbox command (or, for the application, the
// library): the owner migrates and runs the admin commands, the
// application writes, the relay delivers with either source, the console
// reads (and is refused actions), the operator acts. A role without a
// privilege of its block is told which GRANT it lacks, in one line.
func TestRoles(t *testing.T) {
	t.Parallel()
	blocks := grantBlocks(t)
	for _, name := range []string{"owner", "table", "columns", "wal", "console", "operator"} {
		if _, ok := blocks[name]; !ok {
			t.Fatalf("docs/OPERATING.md: no <!-- grants: %s --> SQL block", name)
		}
	}
	t.Run("owner", func(t *testing.T) { t.Parallel(); testOwnerRole(t, blocks) })
	t.Run("writer", func(t *testing.T) { t.Parallel(); testWriterRole(t, blocks) })
	for _, b := range []string{"table", "columns"} {
		t.Run("table relay/"+b, func(t *testing.T) { t.Parallel(); testTableRelayRole(t, blocks, b) })
	}
	t.Run("wal relay", func(t *testing.T) { t.Parallel(); testWALRelayRole(t, blocks) })
	t.Run("console", func(t *testing.T) { t.Parallel(); testConsoleRole(t, blocks) })
	t.Run("operator", func(t *testing.T) { t.Parallel(); testOperatorRole(t, blocks) })
}

// docRoles are the role names the documentation's blocks use.
var docRoles = []string{"outbox_owner", "outbox_app", "outbox_relay", "outbox_console", "outbox_operator"}

// roles is one test's schema (not created yet: the owner block does) and
// its roles, each named after a documented role with a unique suffix.
type roles struct {
	t        *testing.T
	srv      *testdb.Server
	super    *pgxpool.Pool // the test server's superuser
	schema   string
	qs       string
	name     map[string]string // documented role -> this test's role
	password string
	blocks   map[string]string
}

func newRoles(t *testing.T, srv *testdb.Server, blocks map[string]string) *roles {
	t.Helper()
	r := &roles{t: t, srv: srv, super: srv.Pool(t, ""), schema: testdb.NewSchemaName("t"),
		name: map[string]string{}, password: randomHex(t), blocks: blocks}
	r.qs = pgx.Identifier{r.schema}.Sanitize()
	suffix := strings.TrimPrefix(r.schema, "t_")
	for i, d := range docRoles {
		r.name[d] = d + "_" + suffix
		r.createRole(r.name[d])
		if i == 0 {
			// Cleanups run last first: the schema goes before its owner.
			t.Cleanup(func() {
				if _, err := r.super.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+r.qs+" CASCADE"); err != nil {
					t.Errorf("drop schema %s: %v", r.schema, err)
				}
			})
		}
	}
	var super bool
	if err := r.super.QueryRow(context.Background(), `SELECT bool_or(rolsuper) FROM pg_roles WHERE rolname = ANY($1)`, r.roleNames()).Scan(&super); err != nil || super {
		t.Fatalf("a test role is a superuser (%v)", err)
	}
	return r
}

func (r *roles) roleNames() []string {
	var out []string
	for _, n := range r.name {
		out = append(out, n)
	}
	return out
}

// createRole creates a login role without any privilege, dropped when the
// test ends.
func (r *roles) createRole(name string) {
	r.t.Helper()
	q := pgx.Identifier{name}.Sanitize()
	if _, err := r.super.Exec(context.Background(), fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER PASSWORD '%s'", q, r.password)); err != nil {
		r.t.Fatalf("create role %s: %v", name, err)
	}
	r.t.Cleanup(func() {
		if _, err := r.super.Exec(context.Background(), "DROP OWNED BY "+q+"; DROP ROLE "+q); err != nil {
			r.t.Errorf("drop role %s: %v", name, err)
		}
	})
}

// sql is block with the schema and role names of this test.
func (r *roles) sql(block string) string {
	s := regexp.MustCompile(`\bapp_db\b`).ReplaceAllString(r.blocks[block], pgx.Identifier{r.srv.DatabaseName()}.Sanitize())
	s = regexp.MustCompile(`\bapp\b`).ReplaceAllString(s, r.qs)
	return regexp.MustCompile(`\boutbox_(owner|app|relay|console|operator)\b`).ReplaceAllStringFunc(s, func(d string) string {
		return pgx.Identifier{r.name[d]}.Sanitize()
	})
}

// apply runs block as the superuser (the owner and WAL blocks) or as the
// owner (the GRANTs), as the documentation says.
func (r *roles) apply(block string, asOwner bool) {
	r.t.Helper()
	pool := r.super
	if asOwner {
		pool = r.pool("outbox_owner", "")
	}
	if _, err := pool.Exec(context.Background(), r.sql(block)); err != nil {
		r.t.Fatalf("the documented %s block fails: %v\n%s", block, err, r.sql(block))
	}
}

// url is the server's URL for role (a documented role, or another role of
// the test's).
func (r *roles) url(role string) string {
	if n, ok := r.name[role]; ok {
		role = n
	}
	u, err := url.Parse(r.srv.URL())
	if err != nil {
		r.t.Fatal(err)
	}
	u.User = url.UserPassword(role, r.password)
	return u.String()
}

// pool connects as role, with searchPath if not empty.
func (r *roles) pool(role, searchPath string) *pgxpool.Pool {
	r.t.Helper()
	cfg, err := pgxpool.ParseConfig(r.url(role))
	if err != nil {
		r.t.Fatal(err)
	}
	cfg.MaxConns = 4
	if searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(pool.Close)
	return pool
}

// setupOwner applies the owner block and migrates as the owner.
func (r *roles) setupOwner() {
	r.t.Helper()
	r.apply("owner", false)
	r.cliOK("outbox_owner", "migrate", "--schema", r.schema)
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func (c cliResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", c.code, c.stdout, c.stderr)
}

// cli runs the outbox command in-process as role.
func (r *roles) cli(role string, args ...string) cliResult {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := outboxcli.Main(ctx, args, &stdout, &stderr, r.env(role, nil))
	return cliResult{code, stdout.String(), stderr.String()}
}

func (r *roles) env(role string, more map[string]string) func(string) string {
	vars := map[string]string{"DATABASE_URL": r.url(role), "OUTBOX_WAIT_FOR_DB": "false"}
	for k, v := range more {
		vars[k] = v
	}
	return func(k string) string { return vars[k] }
}

func (r *roles) cliOK(role string, args ...string) cliResult {
	r.t.Helper()
	res := r.cli(role, args...)
	if res.code != 0 {
		r.t.Fatalf("as %s: outbox %s: %s", role, strings.Join(args, " "), res)
	}
	return res
}

// wantDenied requires exit 2 and the one line naming grant.
func (r *roles) wantDenied(res cliResult, what, grant string) {
	r.t.Helper()
	if res.code != outboxcli.ExitUsage {
		r.t.Errorf("%s: exit %d, want %d (a missing privilege):\n%s", what, res.code, outboxcli.ExitUsage, res)
	}
	var line string
	for _, l := range strings.Split(strings.TrimSpace(res.stderr), "\n") {
		if strings.HasPrefix(l, "outbox: ") {
			line = l
		}
	}
	r.t.Logf("%s: %s", what, line)
	if !strings.Contains(line, "permission denied for ") || !strings.Contains(line, grant) {
		r.t.Errorf("%s: the last line does not name %q:\n%s", what, grant, res)
	}
}

// grantFor spells the GRANT the checks name.
func (r *roles) grantFor(priv, table, role string) string {
	if n, ok := r.name[role]; ok {
		role = n
	}
	return "GRANT " + priv + " ON " + r.qs + "." + pgx.Identifier{table}.Sanitize() + " TO " + pgx.Identifier{role}.Sanitize()
}

// extraRole creates a role outside the documented ones, with the given
// statements run by the owner (%s is the role).
func (r *roles) extraRole(prefix string, grants ...string) string {
	r.t.Helper()
	name := prefix + "_" + strings.TrimPrefix(r.schema, "t_")
	r.createRole(name)
	owner := r.pool("outbox_owner", "")
	for _, g := range grants {
		q := strings.ReplaceAll(strings.ReplaceAll(g, "%s", pgx.Identifier{name}.Sanitize()), "app.", r.qs+".")
		q = strings.ReplaceAll(q, "SCHEMA app", "SCHEMA "+r.qs)
		if _, err := owner.Exec(context.Background(), q); err != nil {
			r.t.Fatalf("%s: %v", q, err)
		}
	}
	return name
}

// write commits events as role with the Writer; the returned ids are in
// order.
func (r *roles) write(role string, n int, eventType string) []uuid.UUID {
	r.t.Helper()
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: r.schema})
	if err != nil {
		r.t.Fatal(err)
	}
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: eventType, Payload: []byte(`{"total":42}`)}
	}
	var ids []uuid.UUID
	err = pgx.BeginFunc(context.Background(), r.pool(role, ""), func(tx pgx.Tx) error {
		ids, err = w.Write(context.Background(), tx, evs...)
		return err
	})
	if err != nil {
		r.t.Fatalf("as %s: Write: %v", role, err)
	}
	return ids
}

// ownerExec runs a statement as the owner, in the test's schema.
func (r *roles) ownerExec(q string, args ...any) {
	r.t.Helper()
	if _, err := r.pool("outbox_owner", r.schema).Exec(context.Background(), q, args...); err != nil {
		r.t.Fatalf("%s: %v", q, err)
	}
}

func (r *roles) count(where string, args ...any) int {
	r.t.Helper()
	var n int
	if err := r.super.QueryRow(context.Background(), "SELECT count(*) FROM "+r.qs+".outbox_events WHERE "+where, args...).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// The owner, NOSUPERUSER, with only its schema: migrate and every admin
// command, replay and archive included.
func testOwnerRole(t *testing.T, blocks map[string]string) {
	r := newRoles(t, testdb.Shared(), blocks)
	r.setupOwner()
	r.cliOK("outbox_owner", "migrate", "status", "--schema", r.schema)
	ids := r.write("outbox_owner", 4, "order.created")
	r.ownerExec(`UPDATE outbox_events SET attempts = 10, dead_at = now(), last_error = 'boom' WHERE id = $1`, ids[0])
	r.ownerExec(`UPDATE outbox_events SET processed_at = now() - interval '2 days' WHERE id = ANY($1)`, ids[2:])

	for _, args := range [][]string{
		{"status"},
		{"dead-letters"},
		{"retry", ids[0].String()},
		{"cancel", ids[1].String()},
		{"replay", "--mode", "new-id", ids[2].String()},
		{"replay", "list"},
		{"archive", "--older-than", "1d"},
		{"cleanup", "--retention", "1d"},
	} {
		r.cliOK("outbox_owner", append(args, "--schema", r.schema)...)
	}
	if n := r.count("replay_id IS NOT NULL"); n != 1 {
		t.Errorf("%d replayed copies; want 1", n)
	}
	var archived int
	if err := r.super.QueryRow(context.Background(), "SELECT count(*) FROM "+r.qs+".outbox_events_archive").Scan(&archived); err != nil || archived != 2 {
		t.Errorf("%d archived rows (%v); want 2", archived, err)
	}
}

// The application: Write, WriteSQL, Queue and a plain INSERT with the
// table block; without INSERT, or without USAGE, the GRANT is named.
func testWriterRole(t *testing.T, blocks map[string]string) {
	ctx := context.Background()
	r := newRoles(t, testdb.Shared(), blocks)
	r.setupOwner()
	r.apply("table", true)
	app := r.pool("outbox_app", "")
	r.write("outbox_app", 2, "order.created")
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: r.schema})
	if err != nil {
		t.Fatal(err)
	}
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.paid", Payload: []byte(`{}`)}
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if _, err := w.Queue(ctx, b, ev); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatalf("application role: Queue: %v", err)
	}
	db := stdlib.OpenDBFromPool(app)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteSQL(ctx, tx, ev); err != nil {
		t.Fatalf("application role: WriteSQL: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, `INSERT INTO `+r.qs+`.outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '3', 'order.created', '{}')`); err != nil {
		t.Fatalf("application role: a plain INSERT: %v", err)
	}
	if n := r.count("true"); n != 5 {
		t.Errorf("%d rows written; want 5", n)
	}

	noInsert := r.extraRole("noinsert", "GRANT USAGE ON SCHEMA app TO %s")
	noUsage := r.extraRole("nousage")
	for role, want := range map[string]string{
		noInsert: r.grantFor("INSERT", "outbox_events", noInsert),
		noUsage:  "GRANT USAGE ON SCHEMA " + r.qs + " TO " + pgx.Identifier{noUsage}.Sanitize(),
	} {
		var werr error
		_ = pgx.BeginFunc(ctx, r.pool(role, ""), func(tx pgx.Tx) error {
			_, werr = w.Write(ctx, tx, ev)
			return werr
		})
		if !errors.Is(werr, outbox.ErrPrivilege) || !strings.Contains(werr.Error(), want) {
			t.Errorf("Write as %s = %v; want ErrPrivilege naming %q", role, werr, want)
		}
		// database/sql does not tell the role: the GRANT says whose.
		sdb := stdlib.OpenDBFromPool(r.pool(role, ""))
		werr = sqlWrite(ctx, sdb, w, ev)
		sdb.Close()
		if !errors.Is(werr, outbox.ErrPrivilege) || !strings.Contains(werr.Error(), "TO <the application's role>") {
			t.Errorf("WriteSQL as %s = %v; want ErrPrivilege naming the application's role", role, werr)
		}
	}
}

func sqlWrite(ctx context.Context, db *sql.DB, w *outbox.Writer, ev outbox.Event) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // the INSERT failed
	_, err = w.WriteSQL(ctx, tx, ev)
	return err
}

// startCLI runs a long-running command (relay, console) as role until the
// test ends or stop is called; it returns stdout, stderr and stop.
func (r *roles) startCLI(role string, vars map[string]string, args ...string) (stdout, stderr *lockedBuffer, stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() { done <- outboxcli.Main(ctx, args, stdout, stderr, r.env(role, vars)) }()
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				r.t.Errorf("outbox %s did not stop within 30s", args[0])
			}
		})
		return code
	}
	r.t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

// lockedBuffer is a bytes.Buffer safe for one writer and many readers,
// with a wait for its content.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer matches re and returns the submatches.
func (b *lockedBuffer) waitFor(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	eventually(t, testCtx(t), "output matching "+re, func() bool {
		m = rx.FindStringSubmatch(b.String())
		return m != nil
	})
	return m
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The table relay with the table (or column-level) block: it delivers,
// and serves /metrics and /readyz without an error; status runs as the
// relay's role. Without UPDATE it stops at start naming the GRANT.
func testTableRelayRole(t *testing.T, blocks map[string]string, block string) {
	r := newRoles(t, testdb.Shared(), blocks)
	r.setupOwner()
	r.apply(block, true)
	r.write("outbox_app", 3, "order.created")
	stdout, stderr, stop := r.startCLI("outbox_relay", nil, "relay", "--schema", r.schema, "--broker", "stdout:",
		"--http-addr", "127.0.0.1:0", "--poll-interval", "10ms", "--stats-interval", "50ms")
	addr := stderr.waitFor(t, `"msg":"serving /metrics[^\n]*"addr":"([^"]+)"`)[1]
	eventually(t, testCtx(t), "the relay role delivers 3 events", func() bool { return r.count("processed_at IS NOT NULL") == 3 })
	if code, body := httpGet(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz as the relay role: %d %s", code, body)
	}
	// The gauges (refreshed every --stats-interval) and the replay
	// collector (read at each scrape) read the table as the relay's role.
	eventually(t, testCtx(t), "/metrics shows nothing pending and the replayed events", func() bool {
		code, body := httpGet(t, "http://"+addr+"/metrics")
		return code == http.StatusOK && strings.Contains(body, `outbox_replayed_events{state="pending"} 0`) &&
			strings.Contains(body, "outbox_events_pending 0") && strings.Contains(body, `promhttp_metric_handler_errors_total{cause="gathering"} 0`)
	})
	if code := stop(); code != 0 {
		t.Errorf("relay exit %d:\n%s", code, stderr)
	}
	if n := strings.Count(strings.TrimSpace(stdout.String()), "\n") + 1; n != 3 {
		t.Errorf("the broker got %d events; want 3", n)
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("the relay role's relay logged: %s", l)
		}
	}
	r.cliOK("outbox_relay", "status", "--schema", r.schema)

	readOnly := r.extraRole("readonly", "GRANT USAGE ON SCHEMA app TO %s", "GRANT SELECT ON app.outbox_events TO %s")
	res := r.cli(readOnly, "relay", "--schema", r.schema, "--broker", "stdout:")
	r.wantDenied(res, "relay without UPDATE", r.grantFor("UPDATE", "outbox_events", readOnly))
	res = r.cli(readOnly, "relay", "--schema", r.schema, "--broker", "stdout:", "--retention", "7d")
	r.wantDenied(res, "relay without UPDATE", r.grantFor("UPDATE", "outbox_events", readOnly))
	noDelete := r.extraRole("nodelete", "GRANT USAGE ON SCHEMA app TO %s", "GRANT SELECT, UPDATE ON app.outbox_events TO %s")
	res = r.cli(noDelete, "relay", "--schema", r.schema, "--broker", "stdout:", "--retention", "7d")
	r.wantDenied(res, "relay with --retention without DELETE", r.grantFor("DELETE", "outbox_events", noDelete))
}

// The WAL relay: the owner, with REPLICATION, runs migrate --source wal;
// the relay's role, with the table block and REPLICATION and owning
// nothing, streams. The relay's role cannot run that migration itself.
func testWALRelayRole(t *testing.T, blocks map[string]string) {
	srv := testdb.Logical(t)
	r := newRoles(t, srv, blocks)
	r.setupOwner()
	r.apply("wal", false)
	r.apply("table", true)
	in, err := ident.New(r.schema, "")
	if err != nil {
		t.Fatal(err)
	}
	n := wal.NamesFor(in, srv.DatabaseName())
	srv.ReplicationObjects(t, n.Slot, n.Publication)
	t.Cleanup(func() { _ = wal.Drop(context.Background(), r.super, n) })

	res := r.cli("outbox_relay", "migrate", "--source", "wal", "--schema", r.schema)
	t.Logf("migrate --source wal as the relay's role:\n%s", res)
	if res.code != outboxcli.ExitUsage || !strings.Contains(res.stderr, "run it as the role that owns them") {
		t.Errorf("migrate --source wal as the relay's role: want exit 2 saying who may run it:\n%s", res)
	}
	r.cliOK("outbox_owner", "migrate", "--source", "wal", "--schema", r.schema)
	var owner string
	if err := r.super.QueryRow(context.Background(), `SELECT tableowner FROM pg_tables WHERE schemaname = $1 AND tablename = 'outbox_events'`, r.schema).Scan(&owner); err != nil || owner != r.name["outbox_owner"] {
		t.Fatalf("the table's owner is %q (%v); want the owner role", owner, err)
	}

	stdout, stderr, stop := r.startCLI("outbox_relay", nil, "relay", "--source", "wal", "--schema", r.schema, "--broker", "stdout:",
		"--http-addr", "127.0.0.1:0", "--poll-interval", "10ms")
	addr := stderr.waitFor(t, `"msg":"serving /metrics[^\n]*"addr":"([^"]+)"`)[1]
	eventually(t, testCtx(t), "the WAL relay streams as the relay's role", func() bool {
		_, body := httpGet(t, "http://"+addr+"/readyz")
		return strings.Contains(body, "state=streaming")
	})
	r.write("outbox_app", 3, "order.created")
	eventually(t, testCtx(t), "3 events streamed and deleted", func() bool {
		return strings.Count(stdout.String(), "\n") >= 3 && r.count("true") == 0
	})
	if code := stop(); code != 0 {
		t.Errorf("relay exit %d:\n%s", code, stderr)
	}
	r.cliOK("outbox_owner", "migrate", "drop-wal", "--schema", r.schema)
}

// consoleAt starts `outbox console` as role with a token and returns its
// base URL.
func (r *roles) consoleAt(role string) string {
	r.t.Helper()
	stdout, _, _ := r.startCLI(role, map[string]string{"OUTBOX_CONSOLE_TOKEN": "alice:a-console-token-for-tests"},
		"console", "--schema", r.schema, "--http-addr", "127.0.0.1:0")
	return stdout.waitFor(r.t, `on (http://\S+/) \(`)[1]
}

// post sends a console action with the bearer token, not following the
// redirect.
func post(t *testing.T, base, action string, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"actions/"+action, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer a-console-token-for-tests")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The read-only console role: every page loads; the actions, in the
// console and on the command line, are refused naming the GRANT.
func testConsoleRole(t *testing.T, blocks map[string]string) {
	r := newRoles(t, testdb.Shared(), blocks)
	r.setupOwner()
	r.apply("console", true)
	ids := r.write("outbox_owner", 3, "order.created")
	r.ownerExec(`UPDATE outbox_events SET attempts = 10, dead_at = now(), last_error = 'boom' WHERE id = $1`, ids[0])
	r.ownerExec(`UPDATE outbox_events SET processed_at = now() WHERE id = $1`, ids[1])

	base := r.consoleAt("outbox_console")
	for _, p := range []string{"", "dead-letters", "dead-letters?by=error", "dead-letters/group?type=order.created&error=boom",
		"events/" + ids[0].String(), "events/" + ids[1].String(), "aggregates?type=order&id=o-0", "search?q=" + ids[2].String(),
		"confirm?action=retry&scope=one&id=" + ids[0].String()} {
		if code, body := httpGet(t, base+p); code != http.StatusOK {
			t.Errorf("GET /%s as the console role: %d\n%s", p, code, body)
		}
	}
	want := r.grantFor("UPDATE", "outbox_events", "outbox_console")
	code, body := post(t, base, "retry", url.Values{"scope": {"one"}, "id": {ids[0].String()}})
	if code != http.StatusForbidden || !strings.Contains(body, strings.ReplaceAll(want, `"`, "&#34;")) {
		t.Errorf("retry as the console role: %d, want 403 naming %s:\n%s", code, want, body)
	}
	r.cliOK("outbox_console", "status", "--schema", r.schema)
	r.cliOK("outbox_console", "dead-letters", "--schema", r.schema)
	r.wantDenied(r.cli("outbox_console", "retry", "--all", "--schema", r.schema), "retry as the console role", want)
	if n := r.count("dead_at IS NOT NULL"); n != 1 {
		t.Errorf("%d dead letters after the refused actions; want 1", n)
	}
}

// The operator: the console's retry and discard, and the commands that
// change rows.
func testOperatorRole(t *testing.T, blocks map[string]string) {
	r := newRoles(t, testdb.Shared(), blocks)
	r.setupOwner()
	r.apply("operator", true)
	ids := r.write("outbox_owner", 5, "order.created")
	r.ownerExec(`UPDATE outbox_events SET attempts = 10, dead_at = now(), last_error = 'boom' WHERE id = ANY($1)`, ids[:3])
	r.ownerExec(`UPDATE outbox_events SET processed_at = now() - interval '2 days' WHERE id = $1`, ids[4])

	base := r.consoleAt("outbox_operator")
	if code, body := post(t, base, "retry", url.Values{"scope": {"one"}, "id": {ids[0].String()}}); code != http.StatusSeeOther {
		t.Errorf("retry as the operator: %d\n%s", code, body)
	}
	if code, body := post(t, base, "discard", url.Values{"scope": {"one"}, "id": {ids[1].String()}}); code != http.StatusSeeOther {
		t.Errorf("discard as the operator: %d\n%s", code, body)
	}
	if n := r.count("id = $1 AND dead_at IS NULL", ids[0]); n != 1 {
		t.Error("the retried dead letter is still dead")
	}
	if n := r.count("id = $1", ids[1]); n != 0 {
		t.Error("the discarded dead letter is still there")
	}
	r.cliOK("outbox_operator", "dead-letters", "discard", ids[2].String(), "--schema", r.schema)
	r.cliOK("outbox_operator", "cancel", ids[3].String(), "--schema", r.schema)
	r.cliOK("outbox_operator", "cleanup", "--retention", "1d", "--schema", r.schema)
	if n := r.count("true"); n != 1 {
		t.Errorf("%d rows left; want only the retried one", n)
	}
}
