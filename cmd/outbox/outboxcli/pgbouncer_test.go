package outboxcli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// bouncerEnv is the environment of a command reaching f's database through
// a PgBouncer in transaction mode, with the DSN as an operator would write
// it: no exec mode.
func bouncerEnv(t *testing.T, f *fixture) map[string]string {
	t.Helper()
	return map[string]string{"DATABASE_URL": testdb.PgBouncer(t).URL(), "OUTBOX_SCHEMA": f.schema}
}

// The admin commands work through PgBouncer in transaction mode with the
// DSN's defaults, run after one another as an operator would.
func TestPgBouncerAdminCommands(t *testing.T) {
	f := setup(t)
	vars := bouncerEnv(t, f)
	pending := f.write("order.created", 3)
	dead := f.write("order.paid", 2)
	f.deadLetter(dead, "boom")
	f.exec(`UPDATE outbox_events SET processed_at = now() WHERE id = $1`, pending[0])

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate"}, ""},
		{[]string{"migrate", "status"}, "APPLIED"},
		{[]string{"status"}, "dead letters"},
		{[]string{"status", "--json"}, `"dead_letters": 2`},
		{[]string{"dead-letters"}, "2 dead letter(s)"},
		{[]string{"dead-letters", "--group-by", "error"}, "boom"},
		{[]string{"retry", dead[0].String()}, "1"},
		{[]string{"dead-letters", "discard", dead[1].String()}, "1"},
		{[]string{"replay", "--mode", "new-id", pending[0].String()}, "1"},
		{[]string{"replay", "list"}, "new-id"},
		{[]string{"cancel", pending[1].String()}, "cancelled 1 event(s)"},
		{[]string{"cleanup", "--retention", "1h"}, ""},
	} {
		// Each command twice: the second finds PgBouncer's server
		// connections holding whatever the first left on them.
		for range 2 {
			r := run(t, vars, c.args...)
			if r.code != ExitOK && !(c.args[0] == "retry" || c.args[0] == "cancel" || c.args[1] == "discard") {
				t.Errorf("outbox %s through PgBouncer:\n%s", strings.Join(c.args, " "), r)
				break
			}
			if r.code != ExitOK && (strings.Contains(r.stderr, "prepared statement") || strings.Contains(r.stderr, "SQLSTATE")) {
				t.Errorf("outbox %s through PgBouncer:\n%s", strings.Join(c.args, " "), r)
				break
			}
			if c.want != "" && r.code == ExitOK && !strings.Contains(r.stdout, c.want) {
				t.Errorf("outbox %s through PgBouncer: stdout lacks %q:\n%s", strings.Join(c.args, " "), c.want, r)
			}
		}
	}
	if n := f.count("id = $1 AND dead_at IS NULL", dead[0]); n != 1 {
		t.Error("retry did not re-queue the dead letter")
	}
	if n := f.count("id = ANY($1)", pending[1:2]); n != 0 {
		t.Error("cancel did not remove the pending event")
	}
}

// The relay command delivers everything through PgBouncer in transaction
// mode with the DSN's defaults: it sees the pooler and uses an exec mode
// that keeps no prepared statement, saying so once.
func TestPgBouncerRelayCommand(t *testing.T) {
	f := setup(t)
	vars := bouncerEnv(t, f)
	ids := f.write("order.created", 200)
	out := &syncBuffer{}
	r := startRelay(t, out, vars, "--broker", "stdout:", "--batch-size", "20")
	eventually(t, "every event processed", func() bool { return f.count("processed_at IS NOT NULL") == len(ids) })
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
	}
	logs := r.stderr.String()
	if n := strings.Count(logs, "using default_query_exec_mode=cache_describe"); n != 1 {
		t.Errorf("%d lines saying the relay chose cache_describe, want 1:\n%s", n, logs)
	}
	for _, bad := range []string{`"level":"ERROR"`, `"level":"WARN"`, "already exists", "does not exist"} {
		if strings.Contains(logs, bad) {
			t.Errorf("the relay logged %q:\n%s", bad, logs)
		}
	}
	if got := strings.Count(out.String(), "order.created"); got < len(ids) {
		t.Errorf("%d messages on stdout, want %d", got, len(ids))
	}
}

// The console serves its pages and runs its actions through PgBouncer.
func TestPgBouncerConsole(t *testing.T) {
	f := setup(t)
	ids := f.write("order.created", 2)
	f.deadLetter(ids[:1], "boom")
	vars := bouncerEnv(t, f)
	vars["OUTBOX_CONSOLE_TOKEN"] = consoleTestToken
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- runWith(ctx, stdout, stderr, vars, "console", "--http-addr", "127.0.0.1:0") }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	base := stdout.waitFor(t, `on (http://\S+/) \(actions need a token\)`)[1]
	for range 3 { // pages again and again, on whichever server connection PgBouncer lends
		res, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="dead">1<`) {
			t.Fatalf("overview through PgBouncer: %d\n%s", res.StatusCode, body)
		}
	}
	req, _ := http.NewRequest("POST", base+"actions/retry", strings.NewReader("scope=one&id="+ids[0].String()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer a-console-token-for-tests")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || f.count("dead_at IS NULL AND id = $1", ids[0]) != 1 {
		t.Fatalf("retry through PgBouncer: %d; stderr:\n%s", res.StatusCode, stderr)
	}
}

// A startup parameter PgBouncer does not pass (search_path, say) is one
// line naming it and the two fixes.
func TestPgBouncerStartupParameter(t *testing.T) {
	t.Parallel()
	r := run(t, map[string]string{"DATABASE_URL": testdb.PgBouncer(t).URL() + "&search_path=app"}, "status")
	wantExit(t, r, ExitDatabase)
	if !strings.Contains(r.stderr, "refused the startup parameter search_path: remove it from --database-url, or list it in PgBouncer's ignore_startup_parameters") {
		t.Errorf("stderr does not name the parameter and the fix:\n%s", r)
	}
}

// --source wal with --database-url through PgBouncer: refused at start
// naming --direct-url; with --direct-url to PostgreSQL itself, the relay
// streams on it and delivers, the rest of its work going through PgBouncer.
func TestPgBouncerRelayDirectURL(t *testing.T) {
	t.Parallel()
	schema, _, _, pool := walSchema(t)
	wantExit(t, run(t, walEnv(t), "migrate", "--source", "wal", "--schema", schema), ExitOK)
	vars := map[string]string{"DATABASE_URL": testdb.Logical(t).PgBouncer(t).URL(), "OUTBOX_SCHEMA": schema}

	r := run(t, vars, "relay", "--source", "wal", "--broker", "stdout:")
	wantExit(t, r, ExitUsage)
	if !strings.Contains(r.stderr, "replication needs a direct connection") || !strings.Contains(r.stderr, "--direct-url") {
		t.Errorf("relay --source wal through PgBouncer: want one line naming --direct-url:\n%s", r)
	}

	out := &syncBuffer{}
	rr := startRelay(t, out, vars, "--source", "wal", "--direct-url", testdb.Logical(t).URL(), "--broker", "stdout:", "--poll-interval", "50ms")
	const n = 50
	eventually(t, "the relay streaming", func() bool {
		var active bool
		_ = pool.QueryRow(testCtx(t), `SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name LIKE 'pgoutbox relay %' || $1 || '%')`, schema).Scan(&active)
		return active
	})
	if _, err := pool.Exec(testCtx(t), fmt.Sprintf(`INSERT INTO %s.outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', i::text, 'order.created', '{}' FROM generate_series(1, %d) i`, pgx.Identifier{schema}.Sanitize(), n)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every event delivered and deleted", func() bool {
		var left int
		_ = pool.QueryRow(testCtx(t), fmt.Sprintf(`SELECT count(*) FROM %s.outbox_events`, pgx.Identifier{schema}.Sanitize())).Scan(&left)
		return left == 0 && strings.Count(out.String(), "order.created") >= n
	})
	if code := rr.stop(t); code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, rr.stderr)
	}
	logs := rr.stderr.String()
	if !strings.Contains(logs, `"direct_connection":true`) {
		t.Errorf("the start line does not say a direct connection is set:\n%s", logs)
	}
	if strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("the relay logged errors:\n%s", logs)
	}
}
