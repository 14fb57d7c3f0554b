// Package testdb gives each test its own PostgreSQL schema on the real local
// server, so tests run in parallel without seeing each other's rows.
//
// The server is TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable; its database is
// created on first use when it does not exist. Tests of the WAL source, which
// need wal_level=logical, get their server from Logical: the shared one when
// it is logical, otherwise a private one started for the test binary.
// A package's TestMain calls Main, which also gives its Example functions a
// DATABASE_URL of their own.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is used when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the shared test database's URL. Its database is created, once
// per test binary, if it does not exist yet, so that tests connecting with
// the URL directly find it too.
func URL() string {
	u := DefaultURL
	if v := os.Getenv("TEST_DATABASE_URL"); v != "" {
		u = v
	}
	v, _ := ensured.LoadOrStore(u, &ensureOnce{})
	e := v.(*ensureOnce)
	e.once.Do(func() { e.err = createDatabaseIfMissing(u) })
	return u
}

// Server is a PostgreSQL database tests create schemas in: the shared one
// (Shared) or a logical one (Logical).
type Server struct {
	url string
}

// Shared is the shared test database, URL.
func Shared() *Server { return &Server{url: URL()} }

// URL is the server's database URL.
func (s *Server) URL() string { return s.url }

// NewSchemaName returns a fresh schema name with the given prefix.
func NewSchemaName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return strings.ToLower(prefix) + "_" + hex.EncodeToString(b)
}

// Pool returns a pool on the shared test database (Server.Pool).
func Pool(t testing.TB, searchPath string) *pgxpool.Pool { return Shared().Pool(t, searchPath) }

// Schema creates a schema on the shared test database (Server.Schema).
func Schema(t testing.TB) string { return Shared().Schema(t) }

// Drop drops a schema of the shared test database (Server.Drop).
func Drop(t testing.TB, name string) { Shared().Drop(t, name) }

// Pool returns a pool on the server, closed when the test ends. If
// searchPath is not empty it becomes the pool's search_path, so unqualified
// statements (a plain INSERT without the Writer) land in that schema.
func (s *Server) Pool(t testing.TB, searchPath string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		t.Fatalf("testdb: parse %s: %v", s.redacted(), err)
	}
	cfg.MaxConns = 8
	if searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.ensureDatabase(t)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("testdb: PostgreSQL at %s is not answering: %v", s.redacted(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Schema creates an empty schema named after the test and drops it (with
// everything in it) when the test ends. Set TESTDB_KEEP=1 to keep it.
func (s *Server) Schema(t testing.TB) string {
	t.Helper()
	name := NewSchemaName("t")
	conn := s.connect(t)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() { s.Drop(t, name) })
	return name
}

// Drop drops schema name, if it exists, with everything in it.
func (s *Server) Drop(t testing.TB, name string) {
	if os.Getenv("TESTDB_KEEP") != "" {
		t.Logf("testdb: keeping schema %s", name)
		return
	}
	conn := s.connect(t)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("testdb: drop schema %s: %v", name, err)
	}
}

func (s *Server) connect(t testing.TB) *pgx.Conn {
	t.Helper()
	s.ensureDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		t.Fatalf("testdb: connect to %s: %v", s.redacted(), err)
	}
	return conn
}

func (s *Server) redacted() string {
	u, err := url.Parse(s.url)
	if err != nil {
		return "the test database"
	}
	return u.Redacted()
}

// ensured remembers, per URL, that its database exists.
var ensured sync.Map // url -> *ensureOnce

type ensureOnce struct {
	once sync.Once
	err  error
}

// ensureDatabase creates the server's database when it does not exist, once
// per test binary: a fresh PostgreSQL has only "postgres", and the default
// test URL names "test".
func (s *Server) ensureDatabase(t testing.TB) {
	t.Helper()
	v, _ := ensured.LoadOrStore(s.url, &ensureOnce{})
	e := v.(*ensureOnce)
	e.once.Do(func() { e.err = createDatabaseIfMissing(s.url) })
	if e.err != nil {
		t.Fatalf("testdb: %v", e.err)
	}
}

// createDatabaseIfMissing connects to dsn and, if its database does not
// exist, creates it from the server's postgres database.
func createDatabaseIfMissing(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("parse the test database URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return nil // unreachable or refused: the caller's own connect reports it
	}
	name := cfg.Database
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("database %q does not exist, and connecting to database postgres to create it failed: %w", name, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: another test binary created it
		return nil
	}
	if err != nil {
		return fmt.Errorf("database %q does not exist, and creating it failed: %w", name, err)
	}
	fmt.Fprintf(os.Stderr, "testdb: created the test database %q\n", name)
	return nil
}

// Database creates an empty database on the test server, dropped when the
// test ends, and returns its URL (TEST_DATABASE_URL's, naming it). For the
// few tests that need a database to themselves: schemas created and dropped
// by the tests running beside them reset every cached plan in the database
// they share.
func Database(t testing.TB) string {
	t.Helper()
	return Shared().Database(t)
}

// DatabaseEncoded is Database in the server encoding enc (LATIN1,
// SQL_ASCII), with the C locale that any encoding accepts.
func DatabaseEncoded(t testing.TB, enc string) string {
	t.Helper()
	return Shared().DatabaseEncoded(t, enc)
}

// Database is the package's Database on s.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	return s.database(t, "")
}

// DatabaseEncoded is the package's DatabaseEncoded on s.
func (s *Server) DatabaseEncoded(t testing.TB, enc string) string {
	t.Helper()
	return s.database(t, " ENCODING '"+strings.ReplaceAll(enc, "'", "")+"' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
}

func (s *Server) database(t testing.TB, options string) string {
	t.Helper()
	name := NewSchemaName("db")
	conn := s.connect(t)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+options); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		if os.Getenv("TESTDB_KEEP") != "" {
			t.Logf("testdb: keeping database %s", name)
			return
		}
		conn := s.connect(t)
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatalf("testdb: parse the server's URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
