package outboxcli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/wal"
)

// migrate, status, the relay (both sources), migrate --source wal,
// drop-wal and the console, over sslmode=verify-full to a server that
// takes TLS connections only.
func TestCommandsOverTLS(t *testing.T) {
	t.Parallel()
	srv := testdb.TLS(t)
	vars := map[string]string{"DATABASE_URL": srv.URL()}
	if !strings.Contains(srv.URL(), "sslmode=verify-full") || !strings.Contains(srv.URL(), "sslrootcert=") {
		t.Fatalf("the TLS server's URL %s is not verify-full with a root certificate", srv.URL())
	}

	t.Run("table", func(t *testing.T) {
		t.Parallel()
		schema := srv.Schema(t)
		wantExit(t, run(t, vars, "migrate", "--schema", schema), ExitOK)
		f := fixtureOn(t, srv.Server, schema)
		f.write("order.created", 3)
		out := &syncBuffer{}
		r := startRelay(t, out, vars, "--schema", schema, "--broker", "stdout:", "--poll-interval", "10ms")
		eventually(t, "3 events published over TLS", func() bool { return f.count("processed_at IS NOT NULL") == 3 })
		if code := r.stop(t); code != ExitOK {
			t.Fatalf("relay exit %d:\n%s", code, r.stderr)
		}
		if n := strings.Count(out.String(), `"order.created"`); n < 3 {
			t.Errorf("stdout broker got %d events; want 3:\n%s", n, out)
		}
		st := run(t, vars, "status", "--schema", schema)
		wantExit(t, st, ExitOK)
		if !strings.Contains(st.stdout, "pending") {
			t.Errorf("status over TLS:\n%s", st)
		}

		// The console's pages, over the same connection string.
		ctx, cancel := context.WithCancel(context.Background())
		stdout, stderr := &syncBuffer{}, &syncBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- runWith(ctx, stdout, stderr, vars, "console", "--schema", schema, "--http-addr", "127.0.0.1:0")
		}()
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
			}
		})
		base := stdout.waitFor(t, `on (http://\S+/) \(read-only\)`)[1]
		res, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), schema) {
			t.Errorf("console overview over TLS: %d\n%s\nstderr:\n%s", res.StatusCode, body, stderr)
		}
	})

	t.Run("wal", func(t *testing.T) {
		t.Parallel()
		schema := srv.Schema(t)
		in, err := ident.New(schema, "")
		if err != nil {
			t.Fatal(err)
		}
		n := wal.NamesFor(in, srv.DatabaseName())
		srv.ReplicationObjects(t, n.Slot, n.Publication)
		pool := srv.Pool(t, "")
		t.Cleanup(func() { _ = wal.Drop(context.Background(), pool, n) })

		wantExit(t, run(t, vars, "migrate", "--source", "wal", "--schema", schema), ExitOK)
		f := fixtureOn(t, srv.Server, schema)
		out := &syncBuffer{}
		r := startRelay(t, out, vars, "--schema", schema, "--source", "wal", "--broker", "stdout:", "--poll-interval", "10ms", "--http-addr", "127.0.0.1:0")
		addr := r.httpAddr(t)
		eventually(t, "the WAL relay streams over TLS", func() bool {
			_, body := get(t, "http://"+addr+"/readyz")
			return strings.Contains(body, "state=streaming")
		})
		f.write("order.created", 3)
		eventually(t, "3 events streamed over TLS", func() bool { return strings.Count(out.String(), `"order.created"`) >= 3 })
		if code := r.stop(t); code != ExitOK {
			t.Fatalf("relay exit %d:\n%s", code, r.stderr)
		}
		wantExit(t, run(t, vars, "migrate", "drop-wal", "--schema", schema), ExitOK)
	})
}

// fixtureOn is a fixture on a schema already migrated on srv.
func fixtureOn(t *testing.T, srv *testdb.Server, schema string) *fixture {
	t.Helper()
	f := &fixture{t: t, schema: schema, pool: srv.Pool(t, schema)}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	f.writer = w
	return f
}

// A certificate the client refuses is one line and exit 3, at once: the
// relay does not wait for the database (--wait-for-db is on by default),
// since waiting cannot fix it.
func TestCommandsTLSRefused(t *testing.T) {
	t.Parallel()
	srv := testdb.TLS(t)
	otherCA := testdb.OtherCA(t)
	for _, c := range []struct {
		name, dsn, want string
	}{
		{"other CA", srv.URLWith("", map[string]string{"sslrootcert": otherCA}), "is not signed by the CA in sslrootcert=" + otherCA},
		{"wrong host", srv.URLWith("127.0.0.2", nil), "the server's certificate is valid for 127.0.0.1, localhost, not 127.0.0.2"},
	} {
		for _, args := range [][]string{
			{"migrate"},
			{"status"},
			{"relay", "--broker", "stdout:"},
			{"relay", "--broker", "stdout:", "--source", "wal"},
			{"console", "--http-addr", "127.0.0.1:0"},
		} {
			t.Run(c.name+"/"+strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				r := run(t, map[string]string{"DATABASE_URL": c.dsn}, args...)
				t.Logf("stderr:\n%s", r.stderr)
				wantExit(t, r, ExitDatabase)
				if !strings.Contains(r.stderr, "outbox: ") || !strings.Contains(r.stderr, c.want) {
					t.Errorf("stderr does not say %q:\n%s", c.want, r)
				}
				if strings.Contains(r.stderr, "waiting for it") {
					t.Errorf("the relay waited for the database on a certificate error:\n%s", r)
				}
			})
		}
	}
}
