package outboxcli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// env is a getenv over a map.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// dbEnv is the environment of a command against the test database.
func dbEnv() map[string]string { return map[string]string{"DATABASE_URL": testdb.URL()} }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run runs the command in-process, as main does, and returns what it printed.
func run(t *testing.T, vars map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr syncBuffer
	code := runWith(testCtx(t), &stdout, &stderr, vars, args...)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func runWith(ctx context.Context, stdout, stderr io.Writer, vars map[string]string, args ...string) int {
	c := newCLI(stdout, stderr, env(vars))
	c.progressEvery = 0 // every progress line, so tests see them
	return c.main(ctx, args)
}

// wantExit fails the test unless r exited with code; on failure it also
// requires the one-line reason on stderr, besides the relay's log entries.
func wantExit(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got:\n%s", code, r)
	}
	if code != ExitOK {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(r.stderr, "\n"), "\n") {
			if !json.Valid([]byte(l)) && !strings.HasPrefix(l, "time=") { // not a log entry
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "outbox: ") {
			t.Fatalf("want one line \"outbox: ...\" on stderr, got:\n%s", r)
		}
	}
}

// syncBuffer is a goroutine-safe buffer that can wait for its content.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor blocks until the buffer matches re, and returns the first match's
// submatches.
func (b *syncBuffer) waitFor(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if m := rx.FindStringSubmatch(b.buf.String()); m != nil {
			b.mu.Unlock()
			return m
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timeout waiting for %q in:\n%s", re, b.String())
		}
	}
}

// fixture is one test's migrated outbox in a schema of its own.
type fixture struct {
	t      *testing.T
	schema string
	pool   *pgxpool.Pool
	writer *outbox.Writer
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupOn(t, testdb.Shared())
}

// setupLogical is setup on a server with wal_level=logical (testdb.Logical),
// for the WAL source's tests; walEnv is its environment.
func setupLogical(t *testing.T) *fixture {
	t.Helper()
	return setupOn(t, testdb.Logical(t))
}

// walEnv is the environment of a command against the WAL tests' server.
func walEnv(t *testing.T) map[string]string {
	return map[string]string{"DATABASE_URL": testdb.Logical(t).URL()}
}

func setupOn(t *testing.T, srv *testdb.Server) *fixture {
	t.Helper()
	t.Parallel()
	schema := srv.Schema(t)
	pool := srv.Pool(t, schema)
	if _, err := outbox.Migrate(testCtx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, schema: schema, pool: pool, writer: w}
}

// write commits n events of eventType in one transaction and returns their ids.
func (f *fixture) write(eventType string, n int) []uuid.UUID {
	f.t.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: eventType,
			Payload: []byte(fmt.Sprintf(`{"n":%d,"secret":"PAYLOAD-MARKER"}`, i))}
	}
	var ids []uuid.UUID
	err := pgx.BeginFunc(testCtx(f.t), f.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = f.writer.Write(testCtx(f.t), tx, evs...)
		return err
	})
	if err != nil {
		f.t.Fatalf("write: %v", err)
	}
	return ids
}

// exec runs a statement in the fixture's schema (the pool's search_path).
func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(testCtx(f.t), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) count(where string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(testCtx(f.t), "SELECT count(*) FROM outbox_events WHERE "+where, args...).Scan(&n); err != nil {
		f.t.Fatalf("count %s: %v", where, err)
	}
	return n
}

// ids returns the ids of the rows matching where.
func (f *fixture) ids(where string) map[uuid.UUID]bool {
	f.t.Helper()
	rows, err := f.pool.Query(testCtx(f.t), "SELECT id FROM outbox_events WHERE "+where)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[uuid.UUID]bool{}
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { out[id] = true; return nil }); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// deadLetter makes the given rows dead letters, as the relay would.
func (f *fixture) deadLetter(ids []uuid.UUID, lastError string) {
	f.t.Helper()
	f.exec(`UPDATE outbox_events SET attempts = 10, dead_at = now(), last_error = $2 WHERE id = ANY($1)`, ids, lastError)
}

// eventually polls cond every 20ms until it holds or 30s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timeout waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// relayRun is a relay command running in the background.
type relayRun struct {
	cancel context.CancelFunc // what SIGINT/SIGTERM does in main
	stderr *syncBuffer
	done   chan int
}

// startRelay runs `outbox relay args...` in-process until stop.
func startRelay(t *testing.T, stdout io.Writer, vars map[string]string, args ...string) *relayRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &relayRun{cancel: cancel, stderr: &syncBuffer{}, done: make(chan int, 1)}
	go func() { r.done <- runWith(ctx, stdout, r.stderr, vars, append([]string{"relay"}, args...)...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("relay did not stop within 30s")
		}
	})
	return r
}

// stop cancels the relay's context, as the signal handler does, and returns
// its exit code.
func (r *relayRun) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code // for the cleanup
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("relay did not stop within 30s; stderr:\n%s", r.stderr.String())
		return -1
	}
}

// httpAddr waits for the relay to serve HTTP and returns its address.
func (r *relayRun) httpAddr(t *testing.T) string {
	t.Helper()
	return r.stderr.waitFor(t, `"msg":"serving /metrics[^\n]*"addr":"([^"]+)"`)[1]
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
