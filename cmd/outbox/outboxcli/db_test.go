package outboxcli

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestCommandsDoNotHangOnAFrozenDatabase: once connected, a database that
// stops answering (the connection stays open, no byte comes back: a host
// gone behind a live proxy, a partition) makes the command fail within the
// statement deadline, with an error naming the operation and the database,
// instead of waiting for the kernel (~15 minutes). With statement_timeout in
// the connection string the deadline is that plus 5s.
func TestCommandsDoNotHangOnAFrozenDatabase(t *testing.T) {
	f := setup(t)
	f.write("order.created", 2)
	for _, c := range []struct {
		args   []string
		marker string // the first bytes of the statement to freeze
		op     string
	}{
		{[]string{"status"}, "SELECT now()", "status"},
		{[]string{"dead-letters", "--json"}, "dead_at IS NOT NULL", "dead letters"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
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
			q := u.Query()
			q.Set("statement_timeout", "1000")
			u.RawQuery = q.Encode()
			vars := map[string]string{"DATABASE_URL": u.String(), "OUTBOX_SCHEMA": f.schema}

			start := time.Now()
			r := run(t, vars, c.args...)
			took := time.Since(start)
			select {
			case <-frozen:
			default:
				t.Fatalf("the statement never reached the proxy (marker %q):\n%s", c.marker, r)
			}
			// The error comes at 6s (statement_timeout 1s + 5s); closing the
			// pool then waits up to 15s more for pgx to give up on the dead
			// connection's cleanup. Without the deadline the command waits
			// for the test's own 60s context.
			if took > 30*time.Second {
				t.Fatalf("%s on a frozen connection took %s, want about 6s plus pgx's 15s close:\n%s", c.args, took, r)
			}
			wantExit(t, r, ExitFailure)
			for _, want := range []string{c.op, "no answer from the database " + px.Addr() + "/", "within 6s"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
				}
			}
		})
	}
}
