package outboxcli

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

const consoleTestToken = "alice:a-console-token-for-tests"

func TestConsoleCommand(t *testing.T) {
	f := setup(t)
	ids := f.write("order.created", 2)
	f.deadLetter(ids[:1], "broker said <no>")

	vars := dbEnv()
	vars["OUTBOX_CONSOLE_TOKEN"] = consoleTestToken // settings come from the environment too
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runWith(ctx, stdout, stderr, vars, "console", "--schema", f.schema, "--http-addr", "127.0.0.1:0")
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	m := stdout.waitFor(t, `on (http://\S+/) \(actions need a token\)`)
	base := m[1]

	res, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="dead">1<`) {
		t.Fatalf("overview: %d\n%s", res.StatusCode, body)
	}

	req, _ := http.NewRequest("POST", base+"actions/retry", strings.NewReader(url.Values{"scope": {"one"}, "id": {ids[0].String()}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer a-console-token-for-tests")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry: %d", res.StatusCode)
	}
	if n := f.count("dead_at IS NULL AND id = $1", ids[0]); n != 1 {
		t.Error("the dead letter was not re-queued")
	}
	stderr.waitFor(t, `"msg":"console action".*"token":"alice","action":"retry","selector":"id=`+ids[0].String()+`","count":1`)

	cancel()
	select {
	case code := <-done:
		done <- code // for the cleanup
		if code != ExitOK {
			t.Errorf("exit %d after the signal; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("console did not stop")
	}
}

func TestConsoleCommandErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
		args []string
		code int
		want string
	}{
		{"short token", dbEnv(), []string{"--console-token", "short"}, ExitUsage, "--console-token: token \"operator\" is 5 bytes"},
		{"short token from the environment", map[string]string{"DATABASE_URL": testDBURL(), "OUTBOX_CONSOLE_TOKEN": "a:b"}, nil, ExitUsage, "(set by OUTBOX_CONSOLE_TOKEN)"},
		{"malformed tokens", dbEnv(), []string{"--console-token", "a:x,b"}, ExitUsage, "--console-token: want a secret"},
		{"bad address", dbEnv(), []string{"--http-addr", "8080"}, ExitUsage, "--http-addr: \"8080\""},
		{"no database", nil, nil, ExitUsage, "--database-url: required"},
		{"not migrated", dbEnv(), []string{"--schema", "no_such_schema_for_console"}, ExitNotMigrated, "outbox migrate --schema no_such_schema_for_console"},
		{"argument", dbEnv(), []string{"extra"}, ExitUsage, "unexpected argument"},
	} {
		r := run(t, tc.vars, append([]string{"console"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: want exit %d and %q, got:\n%s", tc.name, tc.code, tc.want, r)
		}
	}
}

func testDBURL() string { return dbEnv()["DATABASE_URL"] }

// The relay mounts the console at /console/ beside /metrics, with its state
// on the overview.
func TestRelayMountsTheConsole(t *testing.T) {
	f := setup(t)
	f.write("order.created", 1)
	s := &relaySettings{db: dbOptions{Schema: f.schema}, cfg: outbox.RelayConfig{Workers: 3, BatchSize: 250, Ordered: true}, httpAddr: "127.0.0.1:0"}
	cf := &consoleFlags{}
	o := newOptions("relay", "", "")
	cf.registerRelay(o)
	if err := o.parse([]string{"--console", "--console-hide-payloads"}, env(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := cf.validateRelay(s.httpAddr); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(f.pool, memory.New(), s.relayConfig(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(io.Discard, io.Discard, env(nil))
	srv := c.httpServer(relay, prometheus.NewRegistry())
	if err := c.mountConsole(srv, o, cf, s, f.pool, relay, "nats://127.0.0.1:4222", slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler)
	defer ts.Close()
	for path, want := range map[string][]string{
		"/console/": {"Relay</h2>", "<dd>3</dd>", "<dd>250</dd>", "ordered per aggregate", "nats://127.0.0.1:4222", `id="pending">1<`, "read-only"},
		"/metrics":  {"promhttp_metric_handler_errors_total"},
	} {
		res, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q:\n%s", path, w, b)
			}
		}
	}

	off := &consoleFlags{}
	if err := c.mountConsole(srv, o, off, s, f.pool, relay, "", nil); err != nil {
		t.Errorf("mount without --console: %v", err)
	}
	if err := (&consoleFlags{enabled: true}).validateRelay(""); err == nil || !strings.Contains(err.Error(), "--http-addr") {
		t.Errorf("--console without --http-addr: %v", err)
	}
}

// A console without a token that listens beyond loopback warns: it shows
// every payload to anyone who reaches it. On loopback, or with a token, it
// does not.
func TestConsoleWarnsWhenExposed(t *testing.T) {
	f := setup(t)
	serve := func(addr string, vars map[string]string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stdout, stderr := &syncBuffer{}, &syncBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- runWith(ctx, stdout, stderr, vars, "console", "--schema", f.schema, "--http-addr", addr)
		}()
		stdout.waitFor(t, `outbox console for .* on http://`)
		cancel()
		if code := <-done; code != ExitOK {
			t.Fatalf("console --http-addr %s: exit %d\n%s", addr, code, stderr.String())
		}
		return stderr.String()
	}
	const warning = "listens beyond loopback"
	if out := serve("0.0.0.0:0", dbEnv()); !strings.Contains(out, warning) || !strings.Contains(out, "payloads included") {
		t.Errorf("0.0.0.0 without a token: no warning:\n%s", out)
	}
	if out := serve("127.0.0.1:0", dbEnv()); strings.Contains(out, warning) {
		t.Errorf("127.0.0.1: warned:\n%s", out)
	}
	withToken := dbEnv()
	withToken["OUTBOX_CONSOLE_TOKEN"] = consoleTestToken
	if out := serve("0.0.0.0:0", withToken); strings.Contains(out, warning) {
		t.Errorf("0.0.0.0 with a token: warned:\n%s", out)
	}

	// The relay's console too, on its --http-addr.
	s := &relaySettings{db: dbOptions{Schema: f.schema}, httpAddr: ":9090"}
	cf := &consoleFlags{}
	o := newOptions("relay", "", "")
	cf.registerRelay(o)
	if err := o.parse([]string{"--console"}, env(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(f.pool, memory.New(), s.relayConfig(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(io.Discard, io.Discard, env(nil))
	var logs syncBuffer
	srv := c.httpServer(relay, prometheus.NewRegistry())
	if err := c.mountConsole(srv, o, cf, s, f.pool, relay, "", slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), warning) {
		t.Errorf("relay --console on :9090 without a token: no warning:\n%s", logs.String())
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "127.0.0.2:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.5:8080": false, "console.internal:8080": false, "8080": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
