// Package tcpproxy is the network between a client under test and its peer
// (a broker, PostgreSQL): a loopback TCP proxy that can make the peer go away
// and come back without stopping the shared process, slow it down, partition
// it, and let a test watch, hold or reset the byte stream at the exact moment
// a given message crosses it.
//
//	p := tcpproxy.Start(t, "127.0.0.1:5672")
//	conn := dial("amqp://guest:guest@" + p.Addr() + "/")
//	p.Cut()     // every open connection is reset; new ones are refused
//	p.Restore() // new connections are forwarded again
//
// The listener stays bound while cut (so the address never changes and no
// other process can take the port): a connection attempt succeeds at the TCP
// level and is reset at once, which clients see as ECONNRESET or EOF. In
// Blackhole mode Cut instead accepts and holds new connections without
// forwarding a byte, until Restore resets them.
//
// Partition freezes the connections already open as well: no byte crosses
// (bytes wait in the proxy and the kernel's buffers, as behind a real
// partition until TCP gives up) and Restore delivers them. A Hook sees every
// chunk in both directions and can hold it (block in the hook) or reset the
// connection, so a test can kill a process while its acknowledgement is in
// flight.
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

// Mode is what Cut does with new connections.
type Mode int

const (
	// Reset closes new connections at once with a TCP reset (the default):
	// the peer looks stopped.
	Reset Mode = iota
	// Blackhole accepts new connections and never answers, until Restore
	// or Close resets them: the peer looks partitioned away.
	Blackhole
)

// Direction is the way a chunk travels.
type Direction int

const (
	// ToServer is from the client to the target.
	ToServer Direction = iota
	// ToClient is from the target back to the client.
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
	// Forward passes the chunk on.
	Forward Action = iota
	// ResetConn resets the connection, both sides, without forwarding the
	// chunk.
	ResetConn
)

// Hook sees every chunk before it is forwarded, on the goroutine that
// forwards it: blocking in the hook holds that direction of that connection.
// conn numbers the connection (1 for the first one forwarded). The chunk must
// not be kept after the hook returns.
type Hook func(conn int64, dir Direction, chunk []byte) Action

// Proxy forwards TCP connections from a loopback listener to a target. It is
// safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	latency atomic.Int64 // time.Duration added before forwarding each chunk
	hook    atomic.Pointer[Hook]

	mu       sync.Mutex
	state    state
	mode     Mode
	closed   bool
	restored chan struct{}      // closed unless partitioned
	links    map[*link]struct{} // forwarded connections
	dialling map[net.Conn]struct{}
	holdCut  []net.Conn // accepted while cut in Blackhole mode, reset on Restore
	holdPart []net.Conn // accepted while partitioned, forwarded on Restore
	wg       sync.WaitGroup

	connSeq   atomic.Int64
	accepted  atomic.Int64
	resets    atomic.Int64
	readUp    atomic.Int64 // bytes read from clients, forwarded or not yet
	bytesUp   atomic.Int64 // bytes forwarded to the target
	bytesDown atomic.Int64 // bytes forwarded to clients
}

type state int

const (
	open state = iota
	cut
	partitioned
)

type link struct {
	id             int64
	client, server net.Conn
}

// New listens on 127.0.0.1:0 and forwards every connection to target
// ("host:port"). Close it when done.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{
		ln: ln, target: target, restored: make(chan struct{}),
		links: map[*link]struct{}{}, dialling: map[net.Conn]struct{}{},
	}
	close(p.restored)
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
// far (forwarded, or still waiting out the latency or a hook); a test uses it
// to act once a request is on its way.
func (p *Proxy) BytesFromClients() int64 { return p.readUp.Load() }

// SetLatency delays every chunk of bytes by d, in both directions, on open
// and future connections. Zero removes the delay.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetMode chooses what Cut does with new connections; Reset by default.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

// SetHook installs h on open and future connections; nil removes it.
func (p *Proxy) SetHook(h Hook) {
	if h == nil {
		p.hook.Store(nil)
		return
	}
	p.hook.Store(&h)
}

// Cut resets every open connection and refuses (or, in Blackhole mode, holds)
// new ones until Restore. Cutting a cut proxy is a no-op; cutting a
// partitioned one resets what the partition held.
func (p *Proxy) Cut() {
	p.mu.Lock()
	release := p.setStateLocked(cut)
	links := p.takeLinksLocked()
	conns := p.takeDiallingLocked()
	conns = append(conns, p.holdPart...)
	p.holdPart = nil
	p.mu.Unlock()
	p.resetLinks(links)
	p.resetConns(conns...)
	release() // after the resets, so no byte held by a partition gets through
}

// Partition freezes the path until Restore: open connections stay open but
// no byte crosses, and new connections are accepted but not forwarded.
// Restore delivers the held bytes and forwards the held connections, as a
// healed partition does.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.setStateLocked(partitioned)()
	p.mu.Unlock()
}

// Restore heals a Cut or a Partition: held bytes flow again, connections
// held by a Partition are forwarded and those held by a Cut in Blackhole
// mode are reset, so their clients reconnect.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.setStateLocked(open)()
	forward, reset := p.holdPart, p.holdCut
	p.holdPart, p.holdCut = nil, nil
	p.mu.Unlock()
	p.resetConns(reset...)
	for _, c := range forward {
		p.startForward(c)
	}
}

// ResetAll resets every open connection with a TCP reset, as a crashed peer
// or a middlebox would; new connections are still forwarded.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := p.takeLinksLocked()
	p.mu.Unlock()
	p.resetLinks(links)
}

// Stats are the proxy's counters since New.
type Stats struct {
	Accepted        int64 // client connections accepted
	Resets          int64 // connections ended by the proxy (Cut, ResetAll, hooks, refusals)
	BytesToServer   int64 // forwarded to the target
	BytesToClient   int64 // forwarded to clients
	OpenConnections int   // forwarded connections open now
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	n := len(p.links)
	p.mu.Unlock()
	return Stats{
		Accepted: p.accepted.Load(), Resets: p.resets.Load(),
		BytesToServer: p.bytesUp.Load(), BytesToClient: p.bytesDown.Load(),
		OpenConnections: n,
	}
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
	release := p.setStateLocked(open)
	links := p.takeLinksLocked()
	conns := p.takeDiallingLocked()
	conns = append(conns, p.holdPart...)
	conns = append(conns, p.holdCut...)
	p.holdPart, p.holdCut = nil, nil
	p.mu.Unlock()
	err := p.ln.Close()
	p.resetLinks(links)
	p.resetConns(conns...)
	release() // pipes waiting out a partition find their sockets closed
	p.wg.Wait()
	return err
}

// setStateLocked moves to s. Leaving a partition returns the function that
// opens the gate the pipes wait on; the caller runs it when the held bytes
// may flow (or find their sockets reset).
func (p *Proxy) setStateLocked(s state) (release func()) {
	release = func() {}
	if p.state == partitioned && s != partitioned {
		ch := p.restored
		release = func() { close(ch) }
	}
	if p.state != partitioned && s == partitioned {
		p.restored = make(chan struct{})
	}
	p.state = s
	return release
}

func (p *Proxy) takeLinksLocked() []*link {
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	clear(p.links)
	return out
}

func (p *Proxy) takeDiallingLocked() []net.Conn {
	out := make([]net.Conn, 0, len(p.dialling))
	for c := range p.dialling {
		out = append(out, c)
	}
	clear(p.dialling)
	return out
}

func (p *Proxy) resetLinks(links []*link) {
	for _, l := range links {
		p.resets.Add(1)
		resetConns(l.client, l.server)
	}
}

func (p *Proxy) resetConns(conns ...net.Conn) {
	p.resets.Add(int64(len(conns)))
	resetConns(conns...)
}

// resetConns closes with SO_LINGER 0, so the peer sees a reset rather than an
// orderly end of stream, as when a process dies or a middlebox drops the flow.
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
			continue // a transient accept error (EMFILE and the like)
		}
		p.accepted.Add(1)
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			p.resetConns(c)
		case p.state == cut && p.mode == Blackhole:
			p.holdCut = append(p.holdCut, c)
			p.mu.Unlock()
		case p.state == cut:
			p.mu.Unlock()
			p.resetConns(c)
		case p.state == partitioned:
			p.holdPart = append(p.holdPart, c)
			p.mu.Unlock()
		default:
			p.mu.Unlock()
			p.startForward(c)
		}
	}
}

func (p *Proxy) startForward(c net.Conn) {
	p.mu.Lock()
	p.dialling[c] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go p.forward(c)
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	p.mu.Lock()
	_, still := p.dialling[client] // false: cut or closed while dialling
	delete(p.dialling, client)
	if err != nil || !still {
		p.mu.Unlock()
		if still {
			p.resetConns(client)
		}
		resetConns(server)
		return
	}
	l := &link{id: p.connSeq.Add(1), client: client, server: server}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	done := make(chan bool, 2) // true: that direction ended with an orderly EOF
	go func() { done <- p.pipe(l, ToServer) }()
	go func() { done <- p.pipe(l, ToClient) }()
	orderly := <-done
	if orderly {
		// A half-close was passed on; let the other direction finish.
		<-done
	}
	p.mu.Lock()
	_, mine := p.links[l] // false: Cut, ResetAll or Close already reset it
	delete(p.links, l)
	p.mu.Unlock()
	if mine {
		// After an orderly end this only frees the sockets; after a reset or
		// an error it ends the other side with a reset, so neither is left
		// half-open.
		resetConns(client, server)
	}
	if !orderly {
		<-done // the other direction ends now that both sockets are closed
	}
}

// pipe copies one direction of l until its source ends; it reports whether
// the source ended with an orderly EOF, which it passes on as a half-close.
func (p *Proxy) pipe(l *link, dir Direction) bool {
	src, dst, count := l.client, l.server, &p.bytesUp
	if dir == ToClient {
		src, dst, count = l.server, l.client, &p.bytesDown
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if dir == ToServer {
				p.readUp.Add(int64(n))
			}
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			p.waitRestored()
			if h := p.hook.Load(); h != nil && (*h)(l.id, dir, buf[:n]) == ResetConn {
				p.mu.Lock()
				_, mine := p.links[l]
				delete(p.links, l)
				p.mu.Unlock()
				if mine {
					p.resetLinks([]*link{l})
				}
				return false
			}
			// Counted before the write: the peer may read the bytes (and a
			// test read Stats) before Write returns.
			count.Add(int64(n))
			w, werr := dst.Write(buf[:n])
			if w < n {
				count.Add(int64(w - n))
			}
			if werr != nil {
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

// waitRestored blocks while the proxy is partitioned.
func (p *Proxy) waitRestored() {
	p.mu.Lock()
	ch := p.restored
	p.mu.Unlock()
	<-ch
}
