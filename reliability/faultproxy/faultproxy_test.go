package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/reliability/faultproxy"
)

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
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

func (c *client) roundTrip(line string, d time.Duration) error {
	_ = c.c.SetDeadline(time.Now().Add(d))
	defer c.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
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

func TestForwardAndCut(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p.Addr())
	if err := c.roundTrip("a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := c.roundTrip("b", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("after Cut: %v, want a reset", err)
	}
	if err := dial(t, p.Addr()).roundTrip("c", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("new connection while cut: %v, want a reset", err)
	}
	p.Restore()
	if err := dial(t, p.Addr()).roundTrip("d", 5*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
	if s := p.Stats(); s.Resets < 2 || s.Accepted != 3 {
		t.Errorf("stats = %+v", s)
	}
}

// A blackhole holds the bytes of open connections and delivers them on
// Restore, as a healed partition does.
func TestBlackholeHoldsBytes(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p.Addr())
	if err := c.roundTrip("a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	if err := c.roundTrip("held", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("while blackholed: %v, want a timeout", err)
	}
	fresh := dial(t, p.Addr()) // accepted, held
	if err := fresh.roundTrip("fresh", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection while blackholed: %v, want a timeout", err)
	}
	p.Restore()
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("held bytes after Restore: %q, %v", got, err)
	}
	_ = fresh.c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := fresh.r.ReadString('\n'); err != nil || got != "fresh\n" {
		t.Fatalf("held connection after Restore: %q, %v", got, err)
	}
}

func TestHookHoldsAndResets(t *testing.T) {
	t.Parallel()
	p := start(t)
	release := make(chan struct{})
	seen := make(chan string, 10)
	p.SetHook(func(_ int64, dir faultproxy.Direction, b []byte) faultproxy.Action {
		if dir == faultproxy.ToClient && strings.Contains(string(b), "hold") {
			seen <- "hold"
			<-release
		}
		if dir == faultproxy.ToServer && strings.Contains(string(b), "kill") {
			return faultproxy.Reset
		}
		return faultproxy.Forward
	})
	c := dial(t, p.Addr())
	errc := make(chan error, 1)
	go func() { errc <- c.roundTrip("hold", 10*time.Second) }()
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
	if err := c.roundTrip("kill", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("hook Reset: %v, want a reset", err)
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p.Addr())
	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	if err := c.roundTrip("slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("round trip %s, want >= 200ms", d)
	}
}
