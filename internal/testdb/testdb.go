// Package testdb gives each test its own PostgreSQL schema on the real local
// server, so tests run in parallel without seeing each other's rows.
//
// The server is TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is used when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the test database's URL.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// NewSchemaName returns a fresh schema name with the given prefix.
func NewSchemaName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return strings.ToLower(prefix) + "_" + hex.EncodeToString(b)
}

// Pool returns a pool on the test database, closed when the test ends. If
// searchPath is not empty it becomes the pool's search_path, so unqualified
// statements (a plain INSERT without the Writer) land in that schema.
func Pool(t testing.TB, searchPath string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		t.Fatalf("testdb: parse TEST_DATABASE_URL: %v", err)
	}
	cfg.MaxConns = 8
	if searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("testdb: PostgreSQL at %s is not answering: %v", URL(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Schema creates an empty schema named after the test and drops it (with
// everything in it) when the test ends. Set TESTDB_KEEP=1 to keep it.
func Schema(t testing.TB) string {
	t.Helper()
	name := NewSchemaName("t")
	conn := connect(t)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() { Drop(t, name) })
	return name
}

// Drop drops schema name, if it exists, with everything in it.
func Drop(t testing.TB, name string) {
	if os.Getenv("TESTDB_KEEP") != "" {
		t.Logf("testdb: keeping schema %s", name)
		return
	}
	conn := connect(t)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("testdb: drop schema %s: %v", name, err)
	}
}

func connect(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Fatalf("testdb: connect to %s: %v", URL(), err)
	}
	return conn
}

// Database creates an empty database on the test server, dropped when the
// test ends, and returns its URL (TEST_DATABASE_URL's, naming it). For the
// few tests that need a database to themselves: schemas created and dropped
// by the tests running beside them reset every cached plan in the database
// they share.
func Database(t testing.TB) string {
	t.Helper()
	return database(t, "")
}

// DatabaseEncoded is Database in the server encoding enc (LATIN1,
// SQL_ASCII), with the C locale that any encoding accepts.
func DatabaseEncoded(t testing.TB, enc string) string {
	t.Helper()
	return database(t, " ENCODING '"+strings.ReplaceAll(enc, "'", "")+"' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
}

func database(t testing.TB, options string) string {
	t.Helper()
	name := NewSchemaName("db")
	conn := connect(t)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+options); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		if os.Getenv("TESTDB_KEEP") != "" {
			t.Logf("testdb: keeping database %s", name)
			return
		}
		conn := connect(t)
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("testdb: parse TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
