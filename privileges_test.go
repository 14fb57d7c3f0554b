package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// roleOn creates a login role on e's server with the given GRANTs (%s is
// the role, %t the outbox table, %c its cancellations table) and returns a
// pool connecting as it.
func (e *env) roleOn(prefix string, grants ...string) (string, *pgxpool.Pool) {
	e.t.Helper()
	ctx := context.Background()
	role := prefix + "_" + strings.TrimPrefix(e.schema, "t_")
	qr := pgx.Identifier{role}.Sanitize()
	qs := pgx.Identifier{e.schema}.Sanitize()
	if _, err := e.pool.Exec(ctx, "CREATE ROLE "+qr+" LOGIN"); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if _, err := e.pool.Exec(context.Background(), "DROP OWNED BY "+qr+"; DROP ROLE "+qr); err != nil {
			e.t.Errorf("drop role %s: %v", role, err)
		}
	})
	r := strings.NewReplacer("%s", qr, "%t", qs+".outbox_events", "%c", qs+".outbox_cancels", "%n", qs)
	for _, g := range grants {
		if _, err := e.pool.Exec(ctx, r.Replace(g)); err != nil {
			e.t.Fatalf("%s: %v", r.Replace(g), err)
		}
	}
	u, err := url.Parse(e.srv.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	u.User = url.User(role)
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	return role, pool
}

// runErr runs r until it returns, which it must within 10s.
func runErr(t *testing.T, r *outbox.Relay) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx(t)) }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running after 10s; want it to stop at start on the missing privilege")
		return nil
	}
}

func wantPrivilege(t *testing.T, what string, err error, grant string) {
	t.Helper()
	if !errors.Is(err, outbox.ErrPrivilege) || !strings.Contains(err.Error(), "permission denied for ") || !strings.Contains(err.Error(), grant) {
		t.Errorf("%s = %v; want ErrPrivilege naming %q", what, err, grant)
	}
	var pe *outbox.PrivilegeError
	if errors.As(err, &pe) && pe.Grant != grant {
		t.Errorf("%s: PrivilegeError.Grant = %q; want %q", what, pe.Grant, grant)
	}
}

// Relay.Run checks its role's privileges before it claims anything: the
// first one missing stops it with the GRANT; the WAL source needs more.
func TestRelayPrivileges(t *testing.T) {
	e := setup(t)
	e.write(1)
	qs := pgx.Identifier{e.schema}.Sanitize()
	table := qs + `."outbox_events"`
	grant := func(priv, on, role string) string {
		return "GRANT " + priv + " ON " + on + " TO " + pgx.Identifier{role}.Sanitize()
	}
	relay := func(pool *pgxpool.Pool, cfg outbox.RelayConfig) *outbox.Relay {
		cfg.Schema = e.schema
		r, err := outbox.NewRelay(pool, memory.New(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	role, pool := e.roleOn("nousage")
	wantPrivilege(t, "Run without USAGE", runErr(t, relay(pool, outbox.RelayConfig{})), "GRANT USAGE ON SCHEMA "+qs+" TO "+pgx.Identifier{role}.Sanitize())

	role, pool = e.roleOn("noselect", "GRANT USAGE ON SCHEMA %n TO %s")
	wantPrivilege(t, "Run without SELECT", runErr(t, relay(pool, outbox.RelayConfig{})), grant("SELECT", table, role))

	role, pool = e.roleOn("noupdate", "GRANT USAGE ON SCHEMA %n TO %s", "GRANT SELECT ON %t TO %s")
	wantPrivilege(t, "Run without UPDATE", runErr(t, relay(pool, outbox.RelayConfig{})), grant("UPDATE", table, role))

	role, pool = e.roleOn("nodelete", "GRANT USAGE ON SCHEMA %n TO %s", "GRANT SELECT, UPDATE ON %t TO %s")
	wantPrivilege(t, "Run with DeleteOnPublish without DELETE", runErr(t, relay(pool, outbox.RelayConfig{DeleteOnPublish: true})), grant("DELETE", table, role))
	wantPrivilege(t, "Run with Retention without DELETE", runErr(t, relay(pool, outbox.RelayConfig{Retention: time.Hour})), grant("DELETE", table, role))
	// Without either, DELETE is not needed: the relay delivers.
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: e.schema, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.run(r)
	if err := pub.WaitDistinct(ctx(t), 1); err != nil {
		t.Fatalf("the relay with SELECT and UPDATE published %d of 1: %v", pub.Distinct(), err)
	}
	stop()

	// Admin names the GRANT too: the console and the commands show it.
	adm, err := admin.New(pool, admin.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	_, err = adm.Discard(ctx(t), admin.DiscardSelector{All: true})
	wantPrivilege(t, "Discard without DELETE", err, grant("DELETE", table, role))
}

// The WAL source also reads the cancellations table and deletes what it
// streamed.
func TestRelayPrivilegesWAL(t *testing.T) {
	e := setupOn(t, testdb.Logical(t))
	qs := pgx.Identifier{e.schema}.Sanitize()
	role, pool := e.roleOn("walrelay", "ALTER ROLE %s WITH REPLICATION", "GRANT USAGE ON SCHEMA %n TO %s", "GRANT SELECT, UPDATE ON %t TO %s")
	r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Schema: e.schema, Source: outbox.SourceWAL})
	if err != nil {
		t.Fatal(err)
	}
	wantPrivilege(t, "WAL Run without DELETE", runErr(t, r), "GRANT DELETE ON "+qs+`."outbox_events" TO `+pgx.Identifier{role}.Sanitize())
	if _, err := e.pool.Exec(ctx(t), "GRANT DELETE ON "+qs+".outbox_events TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	r, err = outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Schema: e.schema, Source: outbox.SourceWAL})
	if err != nil {
		t.Fatal(err)
	}
	wantPrivilege(t, "WAL Run without SELECT on the cancellations table", runErr(t, r), "GRANT SELECT ON "+qs+`."outbox_cancels" TO `+pgx.Identifier{role}.Sanitize())
}

// A privilege revoked while the relay runs: each failed batch's log line
// names the GRANT, as the relay's start does, not PostgreSQL's bare
// "permission denied".
func TestRelayPrivilegeRevokedWhileRunning(t *testing.T) {
	e := setup(t)
	role, pool := e.roleOn("revoked", "GRANT USAGE ON SCHEMA %n TO %s", "GRANT SELECT, UPDATE ON %t TO %s")
	var logs syncBuf
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: e.schema, PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	e.write(1)
	if err := pub.WaitDistinct(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	e.execSQL("REVOKE SELECT ON " + pgx.Identifier{e.schema, "outbox_events"}.Sanitize() + " FROM " + pgx.Identifier{role}.Sanitize())
	// The text handler quotes the line: look for its words.
	want := "GRANT SELECT ON \\\"" + e.schema + `\".\"outbox_events\" TO \"` + role + `\"`
	testkit.Eventually(testkit.WithDetail(t, func() string { return "logs:\n" + logs.String() }), 10*time.Second,
		fmt.Sprintf("a log line naming %q", want), func() bool { return strings.Contains(logs.String(), want) })
}

// syncBuf is a log destination tests read while the relay writes.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
