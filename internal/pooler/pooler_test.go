package pooler_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/pooler"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Each probe answers one way on a direct connection and the other through
// PgBouncer in transaction mode (1.18: no prepared statement support, no
// replication connections).
func TestProbes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := testdb.Shared()
	bouncer := direct.PgBouncer(t)
	for _, c := range []struct {
		name                  string
		srv                   *testdb.Server
		pooled, named, listen bool
		replication           string // "" : accepted
	}{
		{"direct", direct, false, true, true, ""},
		{"PgBouncer", bouncer, true, true, false, "unsupported startup parameter: replication"},
	} {
		conn := connect(t, c.srv.URL())
		if got, err := pooler.Detect(ctx, conn); err != nil || got != c.pooled {
			t.Errorf("%s: Detect = %v, %v; want %v", c.name, got, err, c.pooled)
		}
		if got, err := pooler.NamedStatementsPass(ctx, conn); err != nil || got != c.named {
			t.Errorf("%s: NamedStatementsPass = %v, %v; want %v", c.name, got, err, c.named)
		}
		cfg, err := pgx.ParseConfig(c.srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		if got, err := pooler.ListenReaches(ctx, cfg, conn, time.Second); err != nil || got != c.listen {
			t.Errorf("%s: ListenReaches = %v, %v; want %v", c.name, got, err, c.listen)
		}
		err = pooler.Replication(ctx, &cfg.Config)
		switch {
		case c.replication == "" && err != nil:
			t.Errorf("%s: Replication: %v", c.name, err)
		case c.replication != "" && (err == nil || !strings.Contains(err.Error(), c.replication)):
			t.Errorf("%s: Replication = %v; want an error saying %q", c.name, err, c.replication)
		}
	}
}
