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
	c := newClusterDir(t)
	c.run("initdb", "-D", c.dir, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	c.appendConf(fmt.Sprintf("listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\nmax_connections = 100\nshared_buffers = 16MB\n%s", filepath.Dir(c.dir), extraConf))
	c.start()
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

// newClusterDir makes the temporary directory of a cluster (not created
// yet: initdb or pg_basebackup does that) on a free port, owned by the
// postgres user when we are root; removed when the test ends.
func newClusterDir(t *testing.T) *pgCluster {
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
	return c
}

// start starts the server on c.port (another free port if that one was
// taken meanwhile) and registers its stop (-m immediate) when the test ends.
func (c *pgCluster) start() {
	c.t.Helper()
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
			c.port = freePort(c.t)
			continue
		}
		c.t.Fatalf("pg_ctl start (port %d): %v\n%s\nserver log:\n%s", c.port, err, out, log)
	}
	c.t.Cleanup(func() { c.pgctlNoFail("stop", "-m", "immediate", "-w", "-t", "30") })
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

// standby makes a streaming standby of c with pg_basebackup -R (its own
// directory and port, hot_standby on), starts it, and makes it c's
// synchronous standby: from then on a COMMIT on c returns only once the
// standby has flushed it. c needs wal_level replica or logical and
// max_wal_senders (the defaults will do). The standby is stopped when the
// test ends.
func (c *pgCluster) standby() *pgCluster {
	c.t.Helper()
	s := newClusterDir(c.t)
	if _, err := os.Stat(filepath.Join(s.bin, "pg_basebackup")); err != nil {
		missing(c.t, "needs pg_basebackup in %s (PG_BIN_DIR) for a standby of the test's own: %v", s.bin, err)
	}
	s.run("pg_basebackup", "-D", s.dir, "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres",
		"-R", "-X", "stream", "-c", "fast", "--no-sync")
	// The copy has c's configuration: its own socket directory, and no
	// synchronous standby of its own once promoted (a primary whose
	// synchronous_standby_names names no connected standby waits forever
	// at every COMMIT).
	s.appendConf(fmt.Sprintf("unix_socket_directories = '%s'\nhot_standby = on\nsynchronous_standby_names = ''\n", filepath.Dir(s.dir)))
	s.start()
	c.appendConf("synchronous_standby_names = '*'\n")
	c.pgctl("reload")
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(60 * time.Second)
	for {
		var state string
		err := conn.QueryRow(context.Background(), `SELECT COALESCE(max(sync_state), '') FROM pg_stat_replication`).Scan(&state)
		if err != nil {
			c.t.Fatal(err)
		}
		if state == "sync" {
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.log)
			c.t.Fatalf("the standby on port %d is not a synchronous standby after 60 s (sync_state %q); its log:\n%s", s.port, state, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// promote promotes a standby to a primary (pg_ctl promote -w: it returns
// once the server accepts writes) and returns how long that took.
func (c *pgCluster) promote() time.Duration {
	c.t.Helper()
	start := time.Now()
	c.pgctl("promote", "-w", "-t", "60")
	return time.Since(start)
}

// stop stops the server with pg_ctl's shutdown mode ("immediate": every
// process killed, as a crash) and returns how long that took.
func (c *pgCluster) stop(mode string) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.pgctl("stop", "-m", mode, "-w", "-t", "60")
	return time.Since(start)
}
