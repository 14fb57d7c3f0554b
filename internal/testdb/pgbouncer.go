package testdb

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncerBin is Debian's pgbouncer (package pgbouncer, which .ci/run
// installs); PGBOUNCER_BIN overrides it.
const PgBouncerBin = "/usr/sbin/pgbouncer"

// PgBouncerPoolSize is the number of server connections a test's PgBouncer
// opens per database and user: few, so that its clients share them, as a
// transaction pooler's clients do in production.
const PgBouncerPoolSize = 4

// PgBouncer starts a PgBouncer in pool_mode=transaction on a free loopback
// port in front of the shared test database (Server.PgBouncer).
func PgBouncer(t testing.TB) *Server {
	t.Helper()
	return Shared().PgBouncer(t)
}

// PgBouncer starts a PgBouncer of the test's own, in pool_mode=transaction
// on a free loopback port, in front of s, and stops it when the test ends.
// The returned Server's URL names the same database and user through it;
// its Schema and Database create objects on s through it. Without the
// binary (PGBOUNCER_BIN, default PgBouncerBin) the test is skipped, or
// fails under CI=true.
func (s *Server) PgBouncer(t testing.TB) *Server {
	t.Helper()
	bin := PgBouncerBin
	if v := os.Getenv("PGBOUNCER_BIN"); v != "" {
		bin = v
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("testdb: no PgBouncer at %s (Debian package pgbouncer; .ci/run installs it; PGBOUNCER_BIN overrides the path): %v", bin, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s.ensureDatabase(t)
	up, err := url.Parse(s.url)
	if err != nil || up.Host == "" {
		t.Fatalf("testdb: PgBouncer needs the server as a postgres:// URL with a host, not %s", s.redacted())
	}
	host, port := up.Hostname(), up.Port()
	if port == "" {
		port = "5432"
	}
	userName := up.User.Username()
	if userName == "" {
		userName = "postgres"
	}
	b, err := startPgBouncer(bin, host, port, userName)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(b.stop)
	pu := *up
	pu.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	return &Server{url: pu.String()}
}

// pgbouncer is a running PgBouncer: its folder, port and process.
type pgbouncer struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	log  *syncBuffer
	once sync.Once
}

func startPgBouncer(bin, host, port, userName string) (*pgbouncer, error) {
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // pgbouncer refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PgBouncer needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "pgoutbox-pgbouncer-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*pgbouncer, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	b := &pgbouncer{dir: dir, port: l.Addr().(*net.TCPAddr).Port, done: make(chan struct{}), log: &syncBuffer{}}
	l.Close()
	// auth_type=trust still looks the user up in auth_file.
	users := fmt.Sprintf("%q \"\"\n", userName)
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
max_db_connections = %d
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
`, host, port, b.port, filepath.Join(dir, "users.txt"), userName, PgBouncerPoolSize, PgBouncerPoolSize)
	for name, body := range map[string]string{"users.txt": users, "pgbouncer.ini": ini} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return fail(err)
		}
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child exits:
		// keep this goroutine on its thread while PgBouncer runs.
		runtime.LockOSThread()
		if err := b.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = b.cmd.Wait()
		close(b.done)
	}()
	if err := <-started; err != nil {
		return fail(fmt.Errorf("start %s: %w", bin, err))
	}
	dsn := fmt.Sprintf("postgres://%s@127.0.0.1:%d/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", url.User(userName), b.port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, dsn) // the admin console answers once PgBouncer listens
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return b, nil
		}
		select {
		case <-b.done:
			return fail(fmt.Errorf("PgBouncer exited at start: %v\n%s", err, b.log.String()))
		case <-time.After(20 * time.Millisecond): // poll until it accepts connections
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("PgBouncer did not accept connections within 30s: %v\n%s", err, b.log.String())
		}
	}
}

// stop ends PgBouncer (SIGTERM: immediate shutdown; SIGKILL after 10s)
// and removes its folder.
func (b *pgbouncer) stop() {
	b.once.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		os.RemoveAll(b.dir)
	})
}

// syncBuffer is a bytes.Buffer the process writes to while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
