package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/console"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// testToken is the token of the tests' consoles, named "alice".
const testToken = "s3cret-token-for-tests"

// env is one test's console on its own schema.
type env struct {
	t      testing.TB
	pool   *pgxpool.Pool
	schema string
	table  string // quoted
	srv    *httptest.Server
	c      *console.Console
	logs   *syncBuffer
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// setup migrates a fresh schema and serves a console on it; cfg's Schema and
// Logger are filled in.
func setup(t testing.TB, cfg console.Config) *env {
	t.Helper()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, "")
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg.Schema = schema
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	c, err := console.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = "/"
	}
	mux.Handle(prefix, c)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, pool: pool, schema: schema, table: pgx.Identifier{schema, outbox.DefaultTable}.Sanitize(), srv: srv, c: c, logs: logs}
}

func withToken() console.Config {
	return console.Config{Tokens: map[string]string{"alice": testToken}}
}

// ev is an event to seed.
type ev struct {
	aggType, aggID, eventType string
	payload                   string // JSON
	headers                   string // JSON or ""
}

// insert writes events and returns their ids, in order.
func (e *env) insert(evs ...ev) []uuid.UUID {
	e.t.Helper()
	var ids []uuid.UUID
	for _, x := range evs {
		if x.payload == "" {
			x.payload = `{"n":1}`
		}
		var h any
		if x.headers != "" {
			h = x.headers
		}
		var id uuid.UUID
		err := e.pool.QueryRow(ctx(e.t), `INSERT INTO `+e.table+` (aggregate_type, aggregate_id, event_type, payload, headers)
VALUES ($1, $2, $3, $4::jsonb, $5::jsonb) RETURNING id`, x.aggType, x.aggID, x.eventType, x.payload, h).Scan(&id)
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// orders writes n order.created events of aggregate order/aggID.
func (e *env) orders(n int, aggID string) []uuid.UUID {
	evs := make([]ev, n)
	for i := range evs {
		evs[i] = ev{aggType: "order", aggID: aggID, eventType: "order.created", payload: fmt.Sprintf(`{"n":%d}`, i)}
	}
	return e.insert(evs...)
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(ctx(e.t), strings.ReplaceAll(sql, "{T}", e.table), args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// dead makes ids dead letters with error msg, as the relay would.
func (e *env) dead(msg string, ids ...uuid.UUID) {
	e.t.Helper()
	e.exec(`UPDATE {T} SET dead_at = now(), attempts = 10, last_error = $1 WHERE id = ANY($2)`, msg, ids)
}

// held parks ids behind holder, as the ordered relay does.
func (e *env) held(holder uuid.UUID, ids ...uuid.UUID) {
	e.t.Helper()
	e.exec(`UPDATE {T} SET dead_at = now(), held_by = $1 WHERE id = ANY($2)`, holder, ids)
}

func (e *env) published(ids ...uuid.UUID) {
	e.t.Helper()
	e.exec(`UPDATE {T} SET processed_at = now() WHERE id = ANY($1)`, ids)
}

func (e *env) count(where string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctx(e.t), `SELECT count(*) FROM `+e.table+` WHERE `+where, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// client is a browser-like client: a cookie jar, redirects not followed.
func (e *env) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// resp is a response read whole.
type resp struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(c *http.Client, req *http.Request) resp {
	e.t.Helper()
	if c == nil {
		c = e.client()
	}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}
}

func (e *env) get(c *http.Client, path string) resp {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	return e.do(c, req)
}

// post sends a form as a same-origin browser form would.
func (e *env) post(c *http.Client, path string, form url.Values, hdr map[string]string) resp {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return e.do(c, req)
}

// login signs c in with the test token.
func (e *env) login(c *http.Client) {
	e.t.Helper()
	r := e.post(c, "/login", url.Values{"token": {testToken}}, nil)
	if r.status != http.StatusSeeOther {
		e.t.Fatalf("login: %d %s", r.status, r.body)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the CSRF token from a page of a signed-in client.
func (e *env) csrf(c *http.Client) string {
	e.t.Helper()
	m := csrfField.FindStringSubmatch(e.get(c, "/").body)
	if m == nil {
		e.t.Fatal("no CSRF token on the overview of a signed-in client")
	}
	return m[1]
}

// auditLines returns the audit log lines of actions.
func (e *env) auditLines() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "console action" {
			out = append(out, m)
		}
	}
	return out
}

func mustContain(t testing.TB, body string, subs ...string) {
	t.Helper()
	missing := false
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
			missing = true
		}
	}
	if missing {
		t.Logf("page:\n%s", body)
	}
}

func mustNotContain(t testing.TB, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(body, s) {
			t.Errorf("page contains %q", s)
		}
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
