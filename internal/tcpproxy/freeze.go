package tcpproxy

import "sync"

// Freeze freezes the connections open now, as Partition does (no byte
// crosses them in either direction, nothing is reset), while new
// connections are accepted and forwarded as usual: a peer that stopped
// answering on its established connections, as a half-dead server or a
// stateful middlebox that lost its flows does, while a fresh connection
// gets through. thaw delivers the held bytes; calling it again does
// nothing.
//
// It works through the hook: the hook in place when Freeze is called keeps
// seeing every chunk (frozen ones once thawed), and SetHook must not be
// called until thaw.
func (p *Proxy) Freeze() (thaw func()) {
	p.mu.Lock()
	frozen := make(map[int64]bool, len(p.links))
	for l := range p.links {
		frozen[l.id] = true
	}
	p.mu.Unlock()
	prev := p.hook.Load()
	released := make(chan struct{})
	h := Hook(func(conn int64, dir Direction, chunk []byte) Action {
		if frozen[conn] {
			<-released
		}
		if prev != nil {
			return (*prev)(conn, dir, chunk)
		}
		return Forward
	})
	p.hook.Store(&h)
	var once sync.Once
	return func() {
		once.Do(func() {
			p.hook.CompareAndSwap(&h, prev)
			close(released)
		})
	}
}
