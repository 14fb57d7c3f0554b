package tcpproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// echoServer echoes every line back until the client goes away.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a line and reads it back, within d.
func roundTrip(c net.Conn, line string, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return errors.New("echo mismatch: " + got)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// wantDead asserts that c has been ended by the proxy: a reset or EOF, not
// a timeout.
func wantDead(t *testing.T, c net.Conn, what string) {
	t.Helper()
	wantDeadAfter(t, c, "ping", what)
}

// wantDeadAfter sends line on c and asserts that the proxy ends c instead of
// echoing it.
func wantDeadAfter(t *testing.T, c net.Conn, line, what string) {
	t.Helper()
	err := roundTrip(c, line, 5*time.Second)
	if err == nil {
		t.Fatalf("%s: connection still forwards", what)
	}
	if isTimeout(err) {
		t.Fatalf("%s: connection hangs instead of being reset: %v", what, err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("%s: err = %v, want a reset or EOF", what, err)
	}
}

// wantRefused asserts that a new connection to addr is refused or reset,
// at connect time or on first use.
func wantRefused(t *testing.T, addr, what string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: dial: %v, want a reset or refusal", what, err)
		}
		return
	}
	t.Cleanup(func() { c.Close() })
	wantDead(t, c, what)
}

func TestForwards(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	for i := range 3 {
		c := dial(t, p.Addr())
		if err := roundTrip(c, "hello", 5*time.Second); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	if got := p.Accepted(); got != 3 {
		t.Errorf("Accepted = %d, want 3", got)
	}
	if got := p.BytesFromClients(); got != 3*int64(len("hello\n")) {
		t.Errorf("BytesFromClients = %d, want %d", got, 3*len("hello\n"))
	}
}

func TestCutResetsOpenConnectionsAndRefusesNewOnes(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	open := dial(t, p.Addr())
	if err := roundTrip(open, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	wantDead(t, open, "open connection after Cut")
	wantRefused(t, p.Addr(), "new connection while cut")
	p.Cut() // idempotent
	wantRefused(t, p.Addr(), "new connection after a second Cut")

	p.Restore()
	if err := roundTrip(dial(t, p.Addr()), "after", 5*time.Second); err != nil {
		t.Fatalf("new connection after Restore: %v", err)
	}
	wantDead(t, open, "connection cut earlier, after Restore")
}

func TestBlackholeHoldsConnectionsUntilRestore(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	p.SetMode(tcpproxy.Blackhole)
	open := dial(t, p.Addr())
	if err := roundTrip(open, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	wantDead(t, open, "open connection after Cut")

	held := dial(t, p.Addr())
	if err := roundTrip(held, "lost", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("blackholed connection: err = %v, want a timeout (no answer, no reset)", err)
	}
	p.Restore()
	wantDead(t, held, "blackholed connection after Restore")
	if err := roundTrip(dial(t, p.Addr()), "after", 5*time.Second); err != nil {
		t.Fatalf("new connection after Restore: %v", err)
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p.Addr())
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	if err := roundTrip(c, "slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Errorf("round trip took %s, want at least %s (latency each way)", rtt, 2*d)
	}
	p.SetLatency(0)
	if err := roundTrip(c, "fast", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	open := dial(t, p.Addr())
	if err := roundTrip(open, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantDead(t, open, "open connection after Close")
	if c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("dial after Close succeeded")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after Close: %v, want connection refused", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestTargetDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := tcpproxy.Start(t, addr)
	wantRefused(t, p.Addr(), "connection to a dead target")
}

func TestStatsCountConnectionsResetsAndBytes(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p.Addr())
	if err := roundTrip(c, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.OpenConnections != 1 || s.BytesToServer != 2 || s.BytesToClient != 2 {
		t.Errorf("stats with one round trip = %+v, want 1 open, 2 bytes each way", s)
	}
	p.ResetAll()
	wantDead(t, c, "connection after ResetAll")
	if err := roundTrip(dial(t, p.Addr()), "b", 5*time.Second); err != nil {
		t.Fatalf("new connection after ResetAll: %v", err)
	}
	p.Cut()
	wantRefused(t, p.Addr(), "new connection while cut")
	p.Restore()
	if s := p.Stats(); s.Accepted != 3 || s.Resets < 3 {
		t.Errorf("stats = %+v, want 3 accepted and at least 3 resets", s)
	}
}

// A partition holds the bytes of open connections and delivers them on
// Restore, as a healed partition does; connections opened meanwhile are
// forwarded then.
func TestPartitionHoldsBytesUntilRestore(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	if err := roundTrip(c, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Partition()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("open connection while partitioned: %v, want a timeout", err)
	}
	fresh := dial(t, p.Addr())
	freshR := bufio.NewReader(fresh)
	_ = fresh.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := io.WriteString(fresh, "fresh\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := freshR.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("new connection while partitioned: %v, want a timeout", err)
	}
	p.Restore()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("held bytes after Restore: %q, %v", got, err)
	}
	_ = fresh.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := freshR.ReadString('\n'); err != nil || got != "fresh\n" {
		t.Fatalf("held connection after Restore: %q, %v", got, err)
	}
}

// Cutting a partitioned proxy resets what the partition held: no held byte
// crosses.
func TestCutDuringPartitionResetsHeldConnections(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	c := dial(t, p.Addr())
	if err := roundTrip(c, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Partition()
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	fresh := dial(t, p.Addr())
	testkit.Eventually(t, 10*time.Second, "the second connection accepted", func() bool { return p.Accepted() >= 2 })
	p.Cut()
	wantDead(t, c, "open connection after Cut during a partition")
	wantDead(t, fresh, "held connection after Cut during a partition")
	if got := p.Stats().BytesToServer; got != 2 {
		t.Errorf("BytesToServer = %d, want 2 (the held chunk never crossed)", got)
	}
}

func TestHookHoldsAndResets(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, echoServer(t))
	release := make(chan struct{})
	seen := make(chan string, 10)
	p.SetHook(func(_ int64, dir tcpproxy.Direction, b []byte) tcpproxy.Action {
		if dir == tcpproxy.ToClient && strings.Contains(string(b), "hold") {
			seen <- "hold"
			<-release
		}
		if dir == tcpproxy.ToServer && strings.Contains(string(b), "kill") {
			return tcpproxy.ResetConn
		}
		return tcpproxy.Forward
	})
	c := dial(t, p.Addr())
	errc := make(chan error, 1)
	go func() { errc <- roundTrip(c, "hold", 10*time.Second) }()
	<-seen
	select {
	case err := <-errc:
		t.Fatalf("answer crossed a held chunk: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	wantDeadAfter(t, c, "kill", "connection after the hook asked for a reset")
	p.SetHook(nil)
	if err := roundTrip(dial(t, p.Addr()), "kill", 5*time.Second); err != nil {
		t.Fatalf("after SetHook(nil): %v", err)
	}
}
