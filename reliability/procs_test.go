package reliability

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// syncBuffer is a goroutine-safe, growing buffer: a child process's stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n lines.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// proc is a child process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error // after done
}

func startProc(name, bin string, args, env []string) (*proc, error) {
	p := &proc{name: name, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// Children die with the test process, whatever happens to it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the process's exit code, -1 if it died of a signal.
func (p *proc) exitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.signal(syscall.SIGCONT) // a stopped process dies as well, but be explicit
	p.signal(syscall.SIGKILL)
	<-p.done
}

// wait waits up to d for the process to exit.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// rssKB reads the process's resident set size.
func (p *proc) rssKB() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// childEnv is the environment of a child: the test's, minus anything that
// would configure the outbox command behind the test's back.
func childEnv(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OUTBOX_") || k == "DATABASE_URL" || k == "GORACE" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GORACE=halt_on_error=1")
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// ---------------------------------------------------------------------------
// NATS servers

// natsServer is a NATS JetStream server of the test's own: a nats-server
// child process (or, without the binary, an embedded server), on its own port
// and store, that the test can stop and start again.
type natsServer struct {
	t        *testing.T
	port     int
	dir      string
	conf     string // extra configuration
	proc     *proc
	embedded *server.Server
}

type natsOpts struct {
	maxPayload int    // bytes; 0: the server's default (1 MB)
	extraConf  string // appended to the configuration file
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startNATS(t *testing.T, o natsOpts) *natsServer {
	t.Helper()
	n := &natsServer{t: t, port: freePort(t), dir: t.TempDir()}
	if o.maxPayload > 0 {
		n.conf += fmt.Sprintf("max_payload: %d\n", o.maxPayload)
	}
	n.conf += o.extraConf
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.stop(false) })
	return n
}

func (n *natsServer) url() string  { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }
func (n *natsServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

func (n *natsServer) start() error {
	if natsServerBin == "" {
		return n.startEmbedded()
	}
	conf := filepath.Join(n.dir, "nats.conf")
	body := fmt.Sprintf("listen: 127.0.0.1:%d\nserver_name: rel_%d\njetstream {\n  store_dir: %q\n  max_memory_store: 64MB\n  max_file_store: 4GB\n}\n%s",
		n.port, n.port, filepath.Join(n.dir, "js"), n.conf)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return err
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		n.proc, err = startProc("nats-server", natsServerBin, []string{"-c", conf}, childEnv(nil))
		if err != nil {
			return err
		}
		if waitPort(n.addr(), 10*time.Second, n.proc) {
			return nil
		}
		n.proc.kill()
		err = fmt.Errorf("nats-server on port %d did not start: %s", n.port, tail(n.proc.stderr.String(), 20))
		time.Sleep(500 * time.Millisecond) // the port may still be in TIME_WAIT use
	}
	return err
}

func (n *natsServer) startEmbedded() error {
	srv, err := server.NewServer(&server.Options{
		ServerName: fmt.Sprintf("rel_%d", n.port), Host: "127.0.0.1", Port: n.port,
		JetStream: true, StoreDir: filepath.Join(n.dir, "js"), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 4 << 30,
		NoLog: true, NoSigs: true, DisableJetStreamBanner: true,
	})
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("embedded nats-server not ready in 10s")
	}
	n.embedded = srv
	return nil
}

// stop stops the server: SIGKILL (a crash) when hard, else SIGTERM.
func (n *natsServer) stop(hard bool) {
	if n.embedded != nil {
		n.embedded.Shutdown()
		n.embedded.WaitForShutdown()
		n.embedded = nil
		return
	}
	if n.proc == nil || n.proc.exited() {
		return
	}
	if hard {
		n.proc.kill()
		return
	}
	n.proc.signal(syscall.SIGTERM)
	if !n.proc.wait(15 * time.Second) {
		n.proc.kill()
	}
}

// waitPort waits until something accepts connections on addr.
func waitPort(addr string, d time.Duration, p *proc) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if p != nil && p.exited() {
			return false
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// ---------------------------------------------------------------------------
// Relays

// relayOpts configures a relay process.
type relayOpts struct {
	workers        int
	batch          int
	ordered        bool
	listen         bool
	publishTimeout time.Duration
	poll           time.Duration
	maxAttempts    int
	httpAddr       bool     // serve /metrics etc. on 127.0.0.1:0
	extra          []string // more flags
	env            map[string]string
	// dsn replaces the database URL (the relay's PostgreSQL proxy by
	// default); broker replaces the broker URL.
	dsn    string
	broker string
	// command, when set, replaces the outbox binary and its arguments
	// (a relay built for a scenario: reliability/internal/flakyrelay).
	command func(r *relay) (bin string, args []string)
}

// relay is one relay "slot": a name, its proxies to PostgreSQL and to the
// broker, and the process currently running in it (restarted after kills).
type relay struct {
	t       *testing.T
	e       *env
	name    string // also its application_name
	opts    relayOpts
	pg      *tcpproxy.Proxy
	nats    *tcpproxy.Proxy
	wire    tcpproxy.Hook // counts publishes; hooks set by tests call it first
	mu      sync.Mutex
	p       *proc
	starts  int
	allLogs []string // logs of the processes that ended
}

func (r *relay) dsn() string {
	if r.opts.dsn != "" {
		return r.opts.dsn
	}
	if r.e.direct {
		return relayDSNFrom(r.t, r.e.dbURL, "", r.name, "")
	}
	return relayDSNFrom(r.t, r.e.dbURL, r.pg.Addr(), r.name, "")
}

// relayDSN is the test database's URL pointed at addr, with an
// application_name (so the test can find the relay's sessions) and a small
// pool. user, if set, replaces the user.
func relayDSN(t *testing.T, addr, app, user string) string {
	return relayDSNFrom(t, testdb.URL(), addr, app, user)
}

// relayDSNFrom is relayDSN on the database at base.
func relayDSNFrom(t *testing.T, base, addr, app, user string) string {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL must be a URL for the reliability suite: %v", err)
	}
	if addr != "" {
		u.Host = addr
	}
	if user != "" {
		u.User = url.User(user)
	}
	q := u.Query()
	q.Set("application_name", app)
	q.Set("pool_max_conns", "4")
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	return u.String()
}

func (r *relay) args() []string {
	o := r.opts
	broker := o.broker
	switch {
	case broker != "":
	case r.e.broker != nil:
		broker = r.e.broker.url(r.nats.Addr())
	default:
		broker = "nats://" + r.nats.Addr()
	}
	a := []string{"relay",
		"--schema", r.e.schema,
		"--broker", broker,
		"--topic", r.e.prefix + ".{event_type}",
		"--workers", strconv.Itoa(o.workers),
		"--batch-size", strconv.Itoa(o.batch),
		"--poll-interval", o.poll.String(),
		"--publish-timeout", o.publishTimeout.String(),
		"--max-attempts", strconv.Itoa(o.maxAttempts),
		"--outage-base", "50ms", "--outage-max", "1s",
		"--retry-base", "100ms", "--retry-max", "2s",
		"--stats-interval", "2s",
		"--drain-timeout", "20s",
		"--log-format", "json",
	}
	if o.ordered {
		a = append(a, "--ordered")
	}
	if o.listen {
		a = append(a, "--listen")
	}
	if o.httpAddr {
		a = append(a, "--http-addr", "127.0.0.1:0")
	}
	if r.e.wal {
		a = append(a, "--source", "wal")
	}
	return append(a, o.extra...)
}

// start runs a new process in the slot.
func (r *relay) start() *proc {
	r.t.Helper()
	env := map[string]string{"DATABASE_URL": r.dsn()}
	for k, v := range r.opts.env {
		env[k] = v
	}
	bin, args := outboxBin, r.args()
	if r.opts.command != nil {
		bin, args = r.opts.command(r)
	}
	p, err := startProc(r.name, bin, args, childEnv(env))
	if err != nil {
		r.t.Fatalf("start relay %s: %v", r.name, err)
	}
	r.mu.Lock()
	r.p = p
	r.starts++
	r.mu.Unlock()
	return p
}

// current returns the process running in the slot.
func (r *relay) current() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p
}

// retire records the ended process's log.
func (r *relay) retire(p *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allLogs = append(r.allLogs, p.stderr.String())
}

// kill SIGKILLs the running process and waits for it.
func (r *relay) kill() {
	p := r.current()
	if p == nil {
		return
	}
	p.kill()
	r.retire(p)
}

// restart kills the process and starts another.
func (r *relay) restart() *proc {
	r.kill()
	return r.start()
}

// stopGracefully sends SIGTERM and returns the exit code.
func (r *relay) stopGracefully() int {
	p := r.current()
	if p.exited() {
		r.retire(p)
		return p.exitCode()
	}
	// A process killed before it installed its signal handler dies of the
	// signal: wait for it to be up first.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !p.exited(); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(p.stderr.String(), `"msg":"outbox relay started"`) {
			break
		}
	}
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	if !p.wait(40 * time.Second) {
		r.t.Errorf("relay %s did not exit 40s after SIGTERM; killing it", r.name)
		p.kill()
	}
	r.retire(p)
	return p.exitCode()
}

// logs returns the logs of every process the slot ran, the current one last.
func (r *relay) logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := strings.Join(r.allLogs, "")
	if r.p != nil && !r.p.exited() {
		all += r.p.stderr.String()
	}
	return all
}

// httpAddr waits for the relay's "serving /metrics" log line and returns the
// address.
func (r *relay) httpAddr(p *proc) string {
	r.t.Helper()
	re := regexp.MustCompile(`"msg":"serving /metrics, /healthz and /readyz","addr":"([^"]+)"`)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			return m[1]
		}
		if p.exited() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("relay %s never served HTTP; stderr:\n%s", r.name, tail(p.stderr.String(), 30))
	return ""
}

// waitPublishing waits until the relay process has published something
// (bytes beyond the connection handshake crossed its broker proxy), i.e. it
// is past its start-up checks and relaying.
func (r *relay) waitPublishing(p *proc, d time.Duration) {
	r.t.Helper()
	base := r.nats.Stats().BytesToServer
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r.nats.Stats().BytesToServer > base+2048 {
			return
		}
		if p.exited() {
			break
		}
	}
	r.t.Fatalf("relay %s published nothing within %s (exited=%v): %s", r.name, d, p.exited(), tail(p.stderr.String(), 20))
}

// newRelay creates a relay slot with its own proxies (not started).
func (e *env) newRelay(name string, o relayOpts) *relay {
	t := e.t
	if o.workers == 0 {
		o.workers = 2
	}
	if o.batch == 0 {
		o.batch = 100
	}
	if o.publishTimeout == 0 {
		o.publishTimeout = 2 * time.Second
	}
	if o.poll == 0 {
		o.poll = 20 * time.Millisecond
	}
	if o.maxAttempts == 0 {
		o.maxAttempts = 10
	}
	r := &relay{t: t, e: e, name: e.schema + "-" + name, opts: o}
	var err error
	if r.pg, err = tcpproxy.New(e.pgTarget); err != nil {
		t.Fatal(err)
	}
	switch {
	case e.nats != nil:
		if r.nats, err = tcpproxy.New(e.nats.addr()); err != nil {
			t.Fatal(err)
		}
		r.wire = e.wire.hookFor(e.relays.Add(1))
		r.nats.SetHook(r.wire)
	case e.broker != nil: // no wire counter: publishes are not counted
		if r.nats, err = tcpproxy.New(e.broker.addr); err != nil {
			t.Fatal(err)
		}
		r.wire = func(int64, tcpproxy.Direction, []byte) tcpproxy.Action { return tcpproxy.Forward }
	}
	t.Cleanup(func() {
		if p := r.current(); p != nil && !p.exited() {
			p.kill()
			r.retire(p)
		}
		r.pg.Close()
		if r.nats != nil {
			r.nats.Close()
		}
		logs := r.logs()
		if *flagKeepLogs || t.Failed() {
			t.Logf("relay %s (%d processes) log tail:\n%s", r.name, r.starts, tail(logs, 40))
		}
		if strings.Contains(logs, "WARNING: DATA RACE") {
			t.Errorf("relay %s: data race:\n%s", r.name, logs)
		}
		if strings.Contains(logs, "panic:") {
			t.Errorf("relay %s panicked:\n%s", r.name, tail(logs, 60))
		}
	})
	return r
}

// pgAddr is the test database's host:port.
func pgAddr(t *testing.T) string {
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL must be a URL for the reliability suite: %v", err)
	}
	host := u.Host
	if !strings.Contains(host, ":") {
		host += ":5432"
	}
	return host
}

// logLines returns the JSON log lines of s whose msg contains substr.
func logLines(s, substr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

var _ = context.Background

// stopProcess sends SIGSTOP to pid and waits until every thread of it is
// stopped: kill returns once the signal is queued, and a thread running on
// the other CPU may go on for a moment.
func stopProcess(pid int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return 0, err
	}
	for {
		state := procState(pid)
		if strings.Trim(state, "Tt") == "" && state != "" {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("process %d not stopped after %s: thread states %q", pid, timeout, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// procState returns the state letter of every thread of pid (from
// /proc/<pid>/task/*/stat), "" if it cannot be read.
func procState(pid int) string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			b.WriteByte(stat[i+2])
		}
	}
	return b.String()
}
