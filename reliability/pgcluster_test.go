package reliability

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCluster is a PostgreSQL cluster of the test's own (initdb + pg_ctl in a
// temporary directory, on a free port), which the test may restart or crash
// without touching the machine's shared server.
type pgCluster struct {
	t    *testing.T
	bin  string
	dir  string // data directory
	log  string // the server's log (pg_ctl -l: the server must not hold our pipes)
	port int
	asPG bool // run the binaries as the postgres user (we are root)
}

// pgBinDir is where the PostgreSQL server binaries are looked for.
func pgBinDir() string {
	if d := os.Getenv("PG_BIN_DIR"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

// startClusterConf creates and starts a private cluster with a "test"
// database, trust authentication, user postgres, and extraConf's lines in
// postgresql.conf ("wal_level = logical" for the WAL source); stopped when
// the test ends.
func startClusterConf(t *testing.T, extraConf string) *pgCluster {
	t.Helper()
	bin := pgBinDir()
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		missing(t, "needs the PostgreSQL server binaries (initdb, pg_ctl) in %s (PG_BIN_DIR) for a cluster of the test's own: %v", bin, err)
	}
	root, err := os.MkdirTemp("", "outbox-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	c := &pgCluster{t: t, bin: bin, dir: filepath.Join(root, "data"), log: filepath.Join(root, "log"), port: freePort(t), asPG: os.Geteuid() == 0}
	if c.asPG { // initdb refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, a private cluster needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(root, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.run("initdb", "-D", c.dir, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	c.appendConf(fmt.Sprintf("listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\nmax_connections = 100\nshared_buffers = 16MB\n%s", root, extraConf))
	// The free port may be taken between freePort and the server's bind
	// (any process's outgoing connection can get it): then another one.
	for attempt := 1; ; attempt++ {
		c.appendConf(fmt.Sprintf("port = %d\n", c.port)) // the last setting wins
		out, err := c.command("pg_ctl", "-D", c.dir, "start", "-w", "-t", "60", "-l", c.log).CombinedOutput()
		if err == nil {
			break
		}
		log, _ := os.ReadFile(c.log)
		if attempt < 3 && strings.Contains(string(log), "could not bind") {
			c.port = freePort(t)
			continue
		}
		t.Fatalf("pg_ctl start (port %d): %v\n%s\nserver log:\n%s", c.port, err, out, log)
	}
	t.Cleanup(func() { c.pgctlNoFail("stop", "-m", "immediate", "-w", "-t", "30") })
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE test"); err != nil {
		t.Fatal(err)
	}
	return c
}

// url is the cluster's "test" database, in the form of TEST_DATABASE_URL
// (same user and parameters, this host and port).
func (c *pgCluster) url() string {
	u, err := url.Parse(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", c.port))
	if err != nil {
		c.t.Fatal(err)
	}
	return u.String()
}

func (c *pgCluster) addr() string { return fmt.Sprintf("127.0.0.1:%d", c.port) }

// restart restarts the cluster with pg_ctl's shutdown mode ("fast": sessions
// ended, a checkpoint; "immediate": every process killed, crash recovery at
// start, WAL not yet written lost) and returns how long it was down.
func (c *pgCluster) restart(mode string) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.pgctl("restart", "-m", mode, "-w", "-t", "60", "-l", c.log)
	return time.Since(start)
}

func (c *pgCluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if c.asPG {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (c *pgCluster) run(name string, args ...string) {
	c.t.Helper()
	out, err := c.command(name, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// appendConf appends lines to the cluster's postgresql.conf.
func (c *pgCluster) appendConf(lines string) {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(c.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	_, err = f.WriteString(lines)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *pgCluster) pgctl(args ...string) {
	c.t.Helper()
	c.run("pg_ctl", append([]string{"-D", c.dir}, args...)...)
}

func (c *pgCluster) pgctlNoFail(args ...string) {
	_ = c.command("pg_ctl", append([]string{"-D", c.dir}, args...)...).Run()
}
