package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// frozenAdmin returns an Admin on e's table whose pool goes through a proxy,
// connected, and the proxy; Partition freezes the open connection.
func frozenAdmin(t *testing.T, e *env, cfg admin.Config, dsnParams map[string]string) (*admin.Admin, *tcpproxy.Proxy) {
	t.Helper()
	px := tcpproxy.Start(t, testdb.HostPort(t))
	pcfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	testdb.ViaProxy(t, pcfg, px.Addr())
	pcfg.MaxConns = 1
	maps := pcfg.ConnConfig.RuntimeParams
	for k, v := range dsnParams {
		maps[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
	cfg.Schema = e.Schema
	a, err := admin.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Status(ctx(t)); err != nil { // the connection works
		t.Fatal(err)
	}
	t.Cleanup(px.Restore)
	return a, px
}

// TestAdminStatementDeadline: an Admin call on a connection that stopped
// answering (a frozen proxy: the server's host is gone, TCP still open)
// returns within its statement deadline with an error naming the operation
// and the database, instead of hanging until the kernel gives up.
func TestAdminStatementDeadline(t *testing.T) {
	e := setup(t)
	e.Write(1)
	testStatementDeadlines(t, e, []deadlineCall{
		{"status", func(c context.Context, a *admin.Admin) error { _, err := a.Status(c); return err }},
		{"dead letters", func(c context.Context, a *admin.Admin) error {
			_, err := a.DeadLetters(c, admin.DeadLetterFilter{})
			return err
		}},
		{"retry", func(c context.Context, a *admin.Admin) error {
			_, err := a.Retry(c, admin.RetrySelector{All: true})
			return err
		}},
		{"cleanup", func(c context.Context, a *admin.Admin) error {
			_, err := a.Cleanup(c, 0, 10, nil)
			return err
		}},
	})
}

// TestAdminStatementDeadlineFromDSN: with no StatementTimeout, a pool whose
// connection string sets statement_timeout bounds Admin calls by it plus a
// grace; the caller's own deadline is reported as the caller's.
func TestAdminStatementDeadlineFromDSN(t *testing.T) {
	e := setup(t)
	t.Run("statement_timeout", func(t *testing.T) {
		t.Parallel()
		a, px := frozenAdmin(t, e, admin.Config{}, map[string]string{"statement_timeout": "500"})
		px.Partition()
		start := time.Now()
		_, err := a.Status(context.Background())
		took := time.Since(start)
		var te *admin.StatementTimeoutError
		if !errors.As(err, &te) || te.Timeout != 5500*time.Millisecond || took > 10*time.Second {
			t.Fatalf("Status: err = %v after %s, want a StatementTimeoutError after 5.5s", err, took)
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		t.Parallel()
		a, px := frozenAdmin(t, e, admin.Config{}, nil)
		px.Partition()
		c, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := a.Status(c)
		var te *admin.StatementTimeoutError
		if err == nil || errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Status under the caller's deadline: err = %v, want the caller's deadline, not a StatementTimeoutError", err)
		}
	})
}
