package testdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Logical returns a server with wal_level=logical, for the WAL source's
// tests: the shared one when it is (.ci/run sets it), otherwise a private
// PostgreSQL started once for the test binary and stopped by Main (or, at
// the latest, when the test binary exits). TESTDB_PRIVATE_LOGICAL=1 forces
// the private server. Without the server binaries (PG_BIN_DIR) the test is
// skipped, or fails under CI=true.
func Logical(t testing.TB) *Server {
	t.Helper()
	logical.mu.Lock()
	defer logical.mu.Unlock()
	if logical.url == "" && logical.err == nil {
		logical.url, logical.err = startLogical()
	}
	if errors.Is(logical.err, errNoBinaries) && os.Getenv("CI") != "true" {
		t.Skipf("testdb: %v", logical.err)
	}
	if logical.err != nil {
		t.Fatalf("testdb: %v", logical.err)
	}
	return &Server{url: logical.url}
}

var logical struct {
	mu      sync.Mutex
	url     string
	err     error
	cluster *cluster // nil when the shared server is logical
}

var errNoBinaries = errors.New("no PostgreSQL server binaries")

// SharedIsLogical reports whether the shared server has wal_level=logical,
// for tests that run WAL scenarios on servers of their own otherwise.
func SharedIsLogical(t testing.TB) bool {
	t.Helper()
	level, err := walLevel(URL())
	if err != nil {
		t.Fatalf("testdb: check the shared server's wal_level: %v", err)
	}
	return level == "logical"
}

// startLogical answers Logical's question once: the shared server if its
// wal_level is logical, else a private cluster's URL.
func startLogical() (string, error) {
	if os.Getenv("TESTDB_PRIVATE_LOGICAL") != "1" {
		level, err := walLevel(URL())
		if err != nil {
			return "", fmt.Errorf("check the shared server's wal_level: %w", err)
		}
		if level == "logical" {
			return URL(), nil
		}
		fmt.Fprintf(os.Stderr, "testdb: the shared server has wal_level=%s; starting a private PostgreSQL with wal_level=logical for the WAL tests\n", level)
	}
	c, err := startCluster(clusterOptions{})
	if err != nil {
		return "", err
	}
	logical.cluster = c
	return c.url(), nil
}

func walLevel(dsn string) (string, error) {
	if err := createDatabaseIfMissing(dsn); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var level string
	err = conn.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	return level, err
}

// StopLogical stops the private logical server, if a test started one; Main
// calls it. For a TestMain that does not call Main.
func StopLogical() {
	logical.mu.Lock()
	defer logical.mu.Unlock()
	if logical.cluster != nil {
		logical.cluster.stop()
		logical.cluster = nil
		logical.url, logical.err = "", errors.New("the private logical server was stopped (testdb.Main returned)")
	}
}

// binDir finds initdb and postgres: PG_BIN_DIR (or PGBIN), pg_config
// --bindir, then Debian's PostgreSQL 15 folder.
func binDir() (string, error) {
	var tried []string
	for _, d := range []string{os.Getenv("PG_BIN_DIR"), os.Getenv("PGBIN"), pgConfigBinDir(), "/usr/lib/postgresql/15/bin"} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	return "", fmt.Errorf("%w (initdb, postgres) in %s: the WAL tests need wal_level=logical, which the shared server does not have; set PG_BIN_DIR, or set wal_level=logical on the shared server (ALTER SYSTEM, then a restart)",
		errNoBinaries, strings.Join(tried, ", "))
}

func pgConfigBinDir() string {
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// cluster is a private PostgreSQL: its own data folder and port.
type cluster struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the server process has exited
	log  *bytes.Buffer
	opts clusterOptions
}

// clusterOptions change a private cluster from the logical one's defaults.
type clusterOptions struct {
	// listen is listen_addresses; "127.0.0.1" when empty.
	listen string
	// settings are more "name=value" server settings (-c).
	settings []string
	// prepare runs after initdb, before the server starts, with the data
	// folder; chown gives a file it wrote to the server's user.
	prepare func(data string, chown func(path string) error) error
	// urlParams replace sslmode=disable in url().
	urlParams string
	// what names the cluster in the test log ("wal_level=logical").
	what string
	// env is added to the server's environment.
	env []string
}

func (c *cluster) url() string {
	params := "sslmode=disable"
	if c.opts.urlParams != "" {
		params = c.opts.urlParams
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?%s", c.port, params)
}

// startCluster runs initdb and starts postgres as a child of the test
// binary, which it does not outlive: it gets SIGQUIT (immediate shutdown)
// if the test binary dies before stopping it.
func startCluster(opts clusterOptions) (*cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // initdb and postgres refuse to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, a private PostgreSQL needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "pgoutbox-testdb-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if opts.listen == "" {
		opts.listen = "127.0.0.1"
	}
	if opts.what == "" {
		opts.what = "wal_level=logical"
	}
	c := &cluster{dir: dir, done: make(chan struct{}), log: &bytes.Buffer{}, opts: opts}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if opts.prepare != nil {
		chown := func(path string) error {
			if cred == nil {
				return nil
			}
			return os.Chown(path, int(cred.Uid), int(cred.Gid))
		}
		if err := opts.prepare(filepath.Join(dir, "data"), chown); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(c.port), "-k", dir, "-c", "listen_addresses=" + opts.listen,
		"-c", "wal_level=logical", "-c", "max_wal_senders=40", "-c", "max_replication_slots=40",
		"-c", "max_connections=300", "-c", "fsync=off", "-c", "synchronous_commit=off"}
	for _, s := range opts.settings {
		args = append(args, "-c", s)
	}
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if len(opts.env) > 0 {
		c.cmd.Env = append(os.Environ(), opts.env...)
	}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child exits:
		// keep this goroutine on its thread for as long as the server runs.
		runtime.LockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = c.cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.url())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			fmt.Fprintf(os.Stderr, "testdb: private PostgreSQL (%s) on port %d\n", opts.what, c.port)
			return c, nil
		}
		select {
		case <-c.done:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("the private PostgreSQL exited at start: %v\n%s", err, c.log.String())
		case <-time.After(50 * time.Millisecond): // poll until it accepts connections
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("the private PostgreSQL did not accept connections within 60s: %v\n%s", err, c.log.String())
		}
	}
}

// stop shuts the server down (fast, then immediate) and removes its folder.
func (c *cluster) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Signal(syscall.SIGQUIT)
		<-c.done
	}
	os.RemoveAll(c.dir)
}
