// Package faultproxy is the network between the relay and its peers in the
// reliability suite: a loopback TCP proxy that can add latency, reset every
// connection, partition the peers (blackhole: bytes are held, not lost, as a
// real partition does until TCP gives up) and let a test watch, hold or cut
// the byte stream at the exact moment a given message crosses it.
//
// internal/tcpproxy does Cut/Restore for the publisher tests; this one adds
// what fault injection needs: a blackhole that also freezes the connections
// already open, and a hook on every chunk, in both directions, which can
// delay the chunk (the relay is SIGKILLed while its PubAck is held) or reset
// the connection.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction is the way a chunk travels.
type Direction int

const (
	// ToServer: from the client (the relay) to the target (the broker or
	// PostgreSQL).
	ToServer Direction = iota
	// ToClient: from the target back to the client.
	ToClient
)

func (d Direction) String() string {
	if d == ToServer {
		return "to-server"
	}
	return "to-client"
}

// Action is what a Hook asks the proxy to do with a chunk.
type Action int

const (
	// Forward the chunk.
	Forward Action = iota
	// Reset the connection, both sides, without forwarding the chunk.
	Reset
)

// Hook sees every chunk before it is forwarded, on the goroutine that
// forwards it: blocking in the hook holds that direction of that connection.
// conn numbers the connection (1 for the first accepted). The chunk must not
// be kept after the hook returns.
type Hook func(conn int64, dir Direction, chunk []byte) Action

// Proxy forwards TCP connections from a loopback listener to a target. It is
// safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	latency atomic.Int64 // added before forwarding each chunk
	hook    atomic.Pointer[Hook]

	mu        sync.Mutex
	state     state
	restored  chan struct{} // closed on Restore; replaced by Cut(Blackhole)
	closed    bool
	conns     map[*link]struct{}
	held      []net.Conn // accepted while blackholed, forwarded on Restore
	wg        sync.WaitGroup
	connSeq   atomic.Int64
	accepted  atomic.Int64
	resets    atomic.Int64
	bytesUp   atomic.Int64
	bytesDown atomic.Int64
}

type state int

const (
	open state = iota
	resetting
	blackholed
)

type link struct {
	id             int64
	client, server net.Conn
}

// New listens on 127.0.0.1:0 and forwards every connection to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}, restored: make(chan struct{})}
	close(p.restored)
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetTarget changes where new connections go (a restarted server on another
// port); open connections are left alone.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// SetLatency delays every chunk by d, both ways, on open and new connections.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetHook installs h (nil removes it).
func (p *Proxy) SetHook(h Hook) {
	if h == nil {
		p.hook.Store(nil)
		return
	}
	p.hook.Store(&h)
}

// ResetAll resets every open connection with a TCP RST, as a crashed peer or
// a middlebox would; new connections are still forwarded.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := p.takeLinksLocked()
	p.mu.Unlock()
	for _, l := range links {
		p.resetLink(l)
	}
}

// Cut makes the peer unreachable until Restore: every open connection is
// reset and new ones are reset at once (the peer looks stopped).
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.state == blackholed {
		close(p.restored)
	}
	p.state = resetting
	links := p.takeLinksLocked()
	p.mu.Unlock()
	for _, l := range links {
		p.resetLink(l)
	}
}

// Blackhole partitions the peers until Restore: open connections stay open
// but no byte crosses (they wait in the proxy and in the kernel's buffers, as
// behind a partition), and new connections are accepted but not forwarded.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	if p.state != blackholed {
		p.restored = make(chan struct{})
	}
	p.state = blackholed
	p.mu.Unlock()
}

// Restore heals a Cut or a Blackhole: held bytes flow again and held
// connections are forwarded.
func (p *Proxy) Restore() {
	p.mu.Lock()
	if p.state == blackholed {
		close(p.restored)
	}
	p.state = open
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, c := range held {
		p.startForward(c)
	}
}

// Stats are counters since New.
type Stats struct {
	Accepted        int64 // client connections accepted
	Resets          int64 // connections ended by the proxy (Cut, ResetAll, hooks)
	BytesToServer   int64
	BytesToClient   int64
	OpenConnections int
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	n := len(p.conns)
	p.mu.Unlock()
	return Stats{Accepted: p.accepted.Load(), Resets: p.resets.Load(),
		BytesToServer: p.bytesUp.Load(), BytesToClient: p.bytesDown.Load(), OpenConnections: n}
}

// Close stops listening, resets every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.state == blackholed {
		close(p.restored)
	}
	p.state = open
	links := p.takeLinksLocked()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		p.resetLink(l)
	}
	resetConns(held...)
	p.wg.Wait()
	return err
}

func (p *Proxy) takeLinksLocked() []*link {
	out := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		out = append(out, l)
	}
	clear(p.conns)
	return out
}

func (p *Proxy) resetLink(l *link) {
	p.resets.Add(1)
	resetConns(l.client, l.server)
}

// resetConns closes with SO_LINGER 0: the peer sees a reset, as when a
// process dies or a middlebox drops the flow.
func resetConns(conns ...net.Conn) {
	for _, c := range conns {
		if c == nil {
			continue
		}
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
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		switch {
		case p.closed || p.state == resetting:
			p.mu.Unlock()
			p.resets.Add(1)
			resetConns(c)
		case p.state == blackholed:
			p.held = append(p.held, c)
			p.mu.Unlock()
		default:
			p.mu.Unlock()
			p.startForward(c)
		}
	}
}

func (p *Proxy) startForward(c net.Conn) {
	p.wg.Add(1)
	go p.forward(c)
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		resetConns(client)
		return
	}
	l := &link{id: p.connSeq.Add(1), client: client, server: server}
	p.mu.Lock()
	if p.closed || p.state == resetting {
		p.mu.Unlock()
		resetConns(client, server)
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()

	done := make(chan bool, 2)
	go func() { done <- p.pipe(l, ToServer) }()
	go func() { done <- p.pipe(l, ToClient) }()
	orderly := <-done
	if orderly {
		// A half-close was passed on; let the other direction finish.
		<-done
	}
	p.mu.Lock()
	_, mine := p.conns[l]
	delete(p.conns, l)
	p.mu.Unlock()
	if mine {
		resetConns(client, server)
	}
	if !orderly {
		<-done // the other direction ends now that both sockets are closed
	}
}

// pipe copies one direction of l; it reports an orderly EOF, which it passes
// on as a half-close.
func (p *Proxy) pipe(l *link, dir Direction) bool {
	src, dst, count := l.client, l.server, &p.bytesUp
	if dir == ToClient {
		src, dst, count = l.server, l.client, &p.bytesDown
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			p.waitRestored()
			if h := p.hook.Load(); h != nil {
				if (*h)(l.id, dir, buf[:n]) == Reset {
					p.mu.Lock()
					delete(p.conns, l)
					p.mu.Unlock()
					p.resetLink(l)
					return false
				}
			}
			count.Add(int64(n))
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

// waitRestored blocks while the proxy is blackholed.
func (p *Proxy) waitRestored() {
	p.mu.Lock()
	ch := p.restored
	p.mu.Unlock()
	<-ch
}
