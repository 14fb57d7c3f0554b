package testdb

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A database that does not exist is created on first use, as the default
// test database is on a fresh server.
func TestMissingDatabaseIsCreated(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(URL())
	if err != nil {
		t.Skipf("TEST_DATABASE_URL is not a URL: %v", err)
	}
	name := NewSchemaName("db_missing")
	u.Path = "/" + name
	s := &Server{url: u.String()}
	t.Cleanup(func() {
		conn := Shared().connect(t)
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	pool := s.Pool(t, "")
	var got string
	if err := pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&got); err != nil || got != name {
		t.Fatalf("current_database() = %q, %v; want %q", got, err, name)
	}
	pool.Close()
	schema := s.Schema(t) // a second use of the same URL finds it
	if schema == "" {
		t.Fatal("no schema")
	}
}

// The private server the WAL tests fall back to has wal_level=logical, and
// stopping it leaves neither its process nor its folder.
func TestPrivateLogicalServer(t *testing.T) {
	t.Parallel()
	c, err := startCluster(clusterOptions{})
	if err != nil {
		if os.Getenv("CI") != "true" {
			t.Skipf("no private server: %v", err)
		}
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.stop()
		}
	})
	level, err := walLevel(c.url())
	if err != nil || level != "logical" {
		t.Fatalf("wal_level = %q, %v; want logical", level, err)
	}
	c.stop()
	stopped = true
	select {
	case <-c.done:
	case <-time.After(time.Second):
		t.Fatal("the server process is still running after stop")
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("the server's folder %s is still there: %v", c.dir, err)
	}
}
