package outboxcli

import (
	"bytes"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestCommandsDoNotHangOnAFrozenDatabase: once connected, a database that
// stops answering (the connection stays open, no byte comes back: a host
// gone behind a live proxy, a partition) makes the command fail within the
// statement deadline with exit code 3 and a one-line error naming the
// operation and the database, instead of waiting for the kernel (~15
// minutes), and the command exits right after printing it rather than
// waiting for pgx to say goodbye to the dead connection (up to 15s more).
// With statement_timeout in the connection string the deadline is that plus
// 5s; --statement-timeout (or OUTBOX_STATEMENT_TIMEOUT) sets it.
func TestCommandsDoNotHangOnAFrozenDatabase(t *testing.T) {
	f := setup(t)
	f.write("order.created", 2)
	for _, c := range []struct {
		args       []string
		dsnTimeout string            // statement_timeout in the DSN, "" for none
		env        map[string]string // more environment
		marker     string            // the first bytes of the statement to freeze
		op         string
		within     time.Duration // the statement deadline the command must report
		also       string        // more the error must say
	}{
		{args: []string{"status"}, dsnTimeout: "1000", marker: "SELECT now()", op: "status", within: 6 * time.Second},
		{args: []string{"dead-letters", "--json"}, dsnTimeout: "1000", marker: "dead_at IS NOT NULL", op: "dead letters", within: 6 * time.Second},
		{args: []string{"status", "--statement-timeout", "2s"}, dsnTimeout: "1000", marker: "SELECT now()", op: "status", within: 2 * time.Second},
		{args: []string{"dead-letters", "--json"}, env: map[string]string{"OUTBOX_STATEMENT_TIMEOUT": "1500ms"},
			marker: "dead_at IS NOT NULL", op: "dead letters", within: 1500 * time.Millisecond},
		{args: []string{"cleanup", "--retention", "1h", "--statement-timeout", "1s"}, marker: "DELETE", op: "cleanup",
			within: time.Second, also: "(deleted 0 before the failure)"},
	} {
		t.Run(strings.Join(c.args, " ")+" "+c.within.String(), func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(testdb.URL())
			if err != nil || u.Host == "" {
				t.Fatalf("TEST_DATABASE_URL must be a postgres:// URL here: %q", testdb.URL())
			}
			px := tcpproxy.Start(t, u.Host)
			release := make(chan struct{})
			frozen := make(chan struct{}, 1)
			// Hold every byte to the server from the statement on: the
			// connection is up, the server never hears the query.
			px.SetHook(func(_ int64, dir tcpproxy.Direction, chunk []byte) tcpproxy.Action {
				if dir == tcpproxy.ToServer && bytes.Contains(chunk, []byte(c.marker)) {
					select {
					case frozen <- struct{}{}:
					default:
					}
					<-release
				}
				return tcpproxy.Forward
			})
			t.Cleanup(func() { close(release) })
			u.Host = px.Addr()
			if c.dsnTimeout != "" {
				q := u.Query()
				q.Set("statement_timeout", c.dsnTimeout)
				u.RawQuery = q.Encode()
			}
			vars := map[string]string{"DATABASE_URL": u.String(), "OUTBOX_SCHEMA": f.schema}
			for k, v := range c.env {
				vars[k] = v
			}

			start := time.Now()
			r := run(t, vars, c.args...)
			took := time.Since(start)
			select {
			case <-frozen:
			default:
				t.Fatalf("the statement never reached the proxy (marker %q):\n%s", c.marker, r)
			}
			// The error comes at the deadline; the command then returns
			// within poolCloseWait. pgx's own close of the dead connection
			// would add up to 15s; without the deadline the command waits
			// for the test's own 60s context.
			if limit := c.within + poolCloseWait + 2*time.Second; took > limit {
				t.Fatalf("%s on a frozen connection took %s, want at most %s (deadline %s, then a prompt exit):\n%s", c.args, took, limit, c.within, r)
			}
			if took < c.within {
				t.Fatalf("%s failed after %s, before its %s deadline:\n%s", c.args, took, c.within, r)
			}
			wantExit(t, r, ExitDatabase)
			for _, want := range []string{"outbox: " + c.op + ": no answer from the database " + px.Addr() + "/", "within " + c.within.String(), "--statement-timeout", c.also} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
				}
			}
			if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
				t.Errorf("stderr has %d lines, want one:\n%s", n+1, r.stderr)
			}
		})
	}
}

// TestStatementTimeoutFlag: --statement-timeout is on the commands built on
// Admin, shown with its default, and a negative value is refused before
// anything is done.
func TestStatementTimeoutFlag(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{"status"}, {"dead-letters"}, {"dead-letters", "discard"}, {"retry"}, {"cancel"},
		{"cleanup"}, {"archive"}, {"replay"}, {"replay", "list"}, {"replay", "cancel"}} {
		r := run(t, nil, append(cmd, "--help")...)
		wantExit(t, r, ExitOK)
		if !strings.Contains(r.stdout, "--statement-timeout duration") || !strings.Contains(r.stdout, "default 30s, or the connection string's statement_timeout plus 5s") ||
			!strings.Contains(r.stdout, "env OUTBOX_STATEMENT_TIMEOUT") {
			t.Errorf("outbox %s --help does not show --statement-timeout with its default and variable:\n%s", strings.Join(cmd, " "), r.stdout)
		}
	}
	r := run(t, map[string]string{"DATABASE_URL": testdb.URL()}, "status", "--statement-timeout", "-1s")
	wantExit(t, r, ExitUsage)
	if !strings.Contains(r.stderr, "--statement-timeout: -1s: must not be negative") {
		t.Errorf("stderr does not name the flag and the problem:\n%s", r.stderr)
	}
	r = run(t, map[string]string{"DATABASE_URL": testdb.URL(), "OUTBOX_STATEMENT_TIMEOUT": "-2s"}, "status")
	wantExit(t, r, ExitUsage)
	if !strings.Contains(r.stderr, "--statement-timeout: -2s: must not be negative (0 means the default) (set by OUTBOX_STATEMENT_TIMEOUT)") {
		t.Errorf("stderr does not name the variable and the problem:\n%s", r.stderr)
	}
}

// TestDocListsEveryCommand: the package documentation's command list names
// every command and subcommand `outbox --help` has.
func TestDocListsEveryCommand(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(src), "// # Commands")
	section, _, _ = strings.Cut(section, "// # Configuration")
	for _, cmd := range commands() {
		names := []string{cmd.name}
		for _, sub := range cmd.subs {
			names = append(names, cmd.name+" "+sub.name)
		}
		for _, n := range names {
			if !strings.Contains(section, "//\t"+n+" ") && !strings.Contains(section, "//\t"+n+"\n") {
				t.Errorf("doc.go's command list does not describe %q", n)
			}
		}
	}
}
