package outboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
)

// DB is a schema of one test's own, holding the outbox table and the inbox
// table, so tests run in parallel (t.Parallel) without seeing each other's
// events. It is dropped, with everything in it, when the test ends.
type DB struct {
	Schema string
	// Pool's search_path is Schema: unqualified statements (your tables,
	// outbox.Write, the relay) land there.
	Pool *pgxpool.Pool
	// URL is dsn with Schema as search_path, for database/sql:
	// sql.Open("pgx", db.URL) with pgx's stdlib driver.
	URL string
}

// NewDB creates a fresh schema on the database of dsn (a URL or key=value
// connection string), migrates the outbox and the inbox into it, and
// returns it. Create your own tables through db.Pool.
func NewDB(t testing.TB, dsn string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "outboxtest_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("outboxtest: NewDB: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("outboxtest: NewDB: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("outboxtest: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("outboxtest: drop schema %s: %v", schema, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("outboxtest: NewDB: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("outboxtest: NewDB: %v", err)
	}
	t.Cleanup(pool.Close) // before the schema is dropped: cleanups run last first
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("outboxtest: NewDB: %v", err)
	}
	if _, err := inbox.Migrate(ctx, pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("outboxtest: NewDB: %v", err)
	}
	return &DB{Schema: schema, Pool: pool, URL: withSearchPath(dsn, schema)}
}

// withSearchPath returns dsn with search_path set to schema.
func withSearchPath(dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dsn + " search_path=" + schema // key=value; schema is [a-z0-9_]
}
