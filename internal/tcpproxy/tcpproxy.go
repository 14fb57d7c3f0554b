// Package tcpproxy is a small TCP proxy for tests that need a broker to go
// away and come back without stopping the shared broker process: point the
// client at Proxy.Addr, then Cut and Restore.
//
//	p := tcpproxy.Start(t, "127.0.0.1:5672")
//	conn := dial("amqp://guest:guest@" + p.Addr() + "/")
//	p.Cut()     // every open connection is reset; new ones are refused
//	p.Restore() // new connections are forwarded again
//
// The listener stays bound while cut (so the address never changes and no
// other process can take the port): a connection attempt succeeds at the TCP
// level and is reset at once, which clients see as ECONNRESET or EOF. With
// Blackhole the proxy instead accepts and holds new connections without
// forwarding a byte, as a partitioned network does, until Restore closes them.
package tcpproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Mode is what the proxy does with connections while cut.
type Mode int

const (
	// Reset closes new connections at once with a TCP reset (the default):
	// the broker looks stopped.
	Reset Mode = iota
	// Blackhole accepts new connections and never answers, until Restore
	// or Close resets them: the broker looks partitioned away.
	Blackhole
)

// Proxy forwards TCP connections from a loopback listener to a target. It is
// safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	latency atomic.Int64 // time.Duration added before forwarding each chunk

	mu     sync.Mutex
	cut    bool
	mode   Mode
	closed bool
	conns  map[net.Conn]struct{} // every open socket, both sides
	held   map[net.Conn]struct{} // blackholed client sockets
	wg     sync.WaitGroup

	accepted atomic.Int64
	upstream atomic.Int64 // bytes read from clients
}

// New listens on 127.0.0.1:0 and forwards every connection to target
// ("host:port"). Close it when done.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{
		ln: ln, target: target,
		conns: map[net.Conn]struct{}{}, held: map[net.Conn]struct{}{},
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Start is New for tests: it fails t on error and closes the proxy when the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr is the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is how many client connections the proxy has accepted so far,
// forwarded or not; a test uses it to see that a client reconnected.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// BytesFromClients is how many bytes the proxy has read from its clients so
// far (forwarded, or still waiting out the latency); a test uses it to act
// once a request is on its way.
func (p *Proxy) BytesFromClients() int64 { return p.upstream.Load() }

// SetLatency delays every chunk of bytes by d, in both directions, on open
// and future connections. Zero removes the delay.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetMode chooses what Cut does with new connections; Reset by default.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

// Cut resets every open connection and refuses (or, in Blackhole mode, holds)
// new ones until Restore. Cutting a cut proxy is a no-op.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	resetAll(conns)
}

// Restore forwards new connections again and resets the ones held while cut
// in Blackhole mode, so their clients reconnect.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	held := make([]net.Conn, 0, len(p.held))
	for c := range p.held {
		held = append(held, c)
	}
	clear(p.held)
	p.mu.Unlock()
	resetAll(held)
}

// Close stops listening, resets every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.takeConnsLocked()
	for c := range p.held {
		conns = append(conns, c)
	}
	clear(p.held)
	p.mu.Unlock()
	err := p.ln.Close()
	resetAll(conns)
	p.wg.Wait()
	return err
}

func (p *Proxy) takeConnsLocked() []net.Conn {
	out := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	clear(p.conns)
	return out
}

// resetAll closes conns with SO_LINGER 0, so the peer sees a reset rather
// than an orderly end of stream, as when a broker process dies.
func resetAll(conns []net.Conn) {
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error (EMFILE and the like)
		}
		p.accepted.Add(1)
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			resetAll([]net.Conn{c})
		case p.cut && p.mode == Blackhole:
			p.held[c] = struct{}{}
			p.mu.Unlock()
		case p.cut:
			p.mu.Unlock()
			resetAll([]net.Conn{c})
		default:
			p.conns[c] = struct{}{}
			p.mu.Unlock()
			p.wg.Add(1)
			go p.forward(c)
		}
	}
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.drop(client)
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[client]; !ok { // cut or closed while dialling
		p.mu.Unlock()
		resetAll([]net.Conn{client, server})
		return
	}
	p.conns[server] = struct{}{}
	p.mu.Unlock()

	done := make(chan bool, 2) // true: that direction ended with an orderly EOF
	go func() { done <- p.pipe(server, client, &p.upstream) }()
	go func() { done <- p.pipe(client, server, nil) }()
	if orderly := <-done; orderly {
		// A half-close was passed on; let the other direction finish.
		<-done
		p.drop(client)
		p.drop(server)
		return
	}
	// A reset, an error or a cut: end both sides with a reset, so neither is
	// left half-open.
	p.drop(client)
	p.drop(server)
	<-done
}

func (p *Proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	resetAll([]net.Conn{c})
}

// pipe copies src to dst until src ends; it reports whether src ended with
// an orderly EOF, which it passes on to dst as a half-close.
func (p *Proxy) pipe(dst, src net.Conn, count *atomic.Int64) bool {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if count != nil {
				count.Add(int64(n))
			}
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err == io.EOF {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return true
		}
		if err != nil {
			return false
		}
	}
}
