package wal

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBin holds the PostgreSQL 15 server binaries, as Debian installs them
// (the shared test server's version). PGBIN overrides it.
func pgBin() string {
	if d := os.Getenv("PGBIN"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

// cluster is a PostgreSQL of one test's own, for what the shared server
// must not be put through: another wal_level, a restart, an invalidated
// slot.
type cluster struct {
	t    *testing.T
	dir  string
	port int
	as   []string // runuser -u postgres -- when the test runs as root (initdb refuses root)
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin(), "initdb")); err != nil {
		t.Fatalf("PostgreSQL server binaries not found (set PGBIN): %v", err)
	}
	c := &cluster{t: t, dir: t.TempDir()}
	if u, _ := user.Current(); u != nil && u.Uid == "0" {
		c.as = []string{"runuser", "-u", "postgres", "--"}
		c.dir = filepath.Join(os.TempDir(), "pgoutbox-wal-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if err := os.Mkdir(c.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("chown", "postgres", c.dir).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = os.RemoveAll(c.dir) })
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	c.run("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "--no-sync")
	t.Cleanup(func() { _ = c.cmd("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop").Run() })
	return c
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

func (c *cluster) cmd(name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, c.as...), filepath.Join(pgBin(), name)), args...)
	return exec.Command(argv[0], argv[1:]...)
}

func (c *cluster) run(name string, args ...string) {
	c.t.Helper()
	if out, err := c.cmd(name, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		c.t.Fatalf("%s: %v\n%s\nserver log:\n%s", name, err, out, log)
	}
}

// start (re)starts the server with these settings on top of the test's.
func (c *cluster) start(settings ...string) {
	c.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_wal_senders=4 -c max_replication_slots=4 -c shared_buffers=16MB -c fsync=off", c.port, c.dir)
	for _, s := range settings {
		opts += " -c " + s
	}
	_ = c.cmd("pg_ctl", "-D", c.data(), "-m", "fast", "-w", "stop").Run()
	c.run("pg_ctl", "-D", c.data(), "-o", opts, "-l", filepath.Join(c.dir, "log"), "-w", "-t", "60", "start")
}

func (c *cluster) connect() *pgx.Conn {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
