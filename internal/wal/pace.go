package wal

import (
	"net"
	"time"

	"github.com/pgoutbox/outbox/internal/rate"
)

// pacer spaces the stream's socket reads under a heavy stream. The server
// sends each pgoutput message as soon as it is decoded (a one-event
// transaction is three messages), so a reader that reads whenever data
// arrives wakes up once or more per transaction: at thousands of
// transactions a second those wake-ups, the reads and the small batches
// they make cost the relay more CPU than the events themselves. Paced, the
// messages wait in the socket buffer and one read takes many transactions,
// which the relay then publishes as one batch.
//
// A stream catching up with a backlog (transactions read more than
// catchingUp after their commit) is paced whatever its transaction rate:
// its events are late already, and a reader that keeps up with the
// server's decoding wakes for every few messages, taking from the server
// the CPU it decodes with.
//
// What waits in the socket during a pace is kept under paceBytes: past the
// socket buffers the server would stop decoding until the relay reads, and
// a backlog (large transactions, megabytes a second) would drain at the
// pace of the reads instead of the server's.
type pacer struct {
	max   time.Duration // StreamConfig.Pace; 0 never paces
	above float64       // StreamConfig.PaceAbove, transactions/s
	txs   rate.Window   // transactions decoded
	bytes rate.Window   // bytes read
	late  bool          // the last transaction was read catchingUp after its commit
}

// catchingUp is how long after its commit a transaction is read when the
// stream is reading a backlog. Well above the clock skew between the relay
// and the server, and the latency of a live stream.
const catchingUp = time.Second

// paceBytes bounds the bytes one pace lets pile up in the socket: well
// inside the smallest receive window Linux starts a connection with (half
// of tcp_rmem's 128 KiB default), so the server's sends never block on it.
const paceBytes = 32 << 10

// The transaction rate is taken over a second: a burst after a stall (a
// slow commit, say) is not a heavy stream, and must not pace the reads
// that catch up with it. The byte rate reacts within 100ms.
func newPacer(max time.Duration, above int) *pacer {
	return &pacer{max: max, above: float64(above),
		txs: rate.Window{Span: time.Second}, bytes: rate.Window{Span: 100 * time.Millisecond}}
}

// commit records a transaction committed at committed and read at now.
// The stream's goroutine only calls commit, read and pace.
func (p *pacer) commit(now, committed time.Time) {
	if p.max > 0 {
		p.txs.Add(now, 1)
		p.late = now.Sub(committed) > catchingUp
	}
}

// read records n bytes read at now.
func (p *pacer) read(now time.Time, n int) {
	if p.max > 0 {
		p.bytes.Add(now, n)
	}
}

// pace is the shortest time between two reads: none up to above
// transactions/s, rising linearly to max at twice that rate, max while
// catching up, and never so long that more than paceBytes arrive
// meanwhile.
func (p *pacer) pace(now time.Time) time.Duration {
	if p.max <= 0 {
		return 0
	}
	heavy := rate.Ramp(p.txs.Rate(now), p.above)
	if p.late {
		heavy = 1
	}
	d := time.Duration(heavy * float64(p.max))
	if b := p.bytes.Rate(now); b > 0 {
		d = min(d, time.Duration(paceBytes/b*float64(time.Second)))
	}
	return d
}

// pacedConn is the stream's connection: a read that follows one that
// emptied the socket waits until the pace has passed since it. A read that
// filled the caller's buffer found more than it could take and is followed
// at once, and an idle stream's first read returns as soon as data arrives,
// so pacing adds at most one pace to an event's latency, and only under a
// heavy stream. Only the stream's goroutine reads.
type pacedConn struct {
	net.Conn
	p       readPacer
	last    time.Time // end of the last read that emptied the socket
	drained bool      // the last read returned less than asked
}

// readPacer is what pacedConn needs of a pacer.
type readPacer interface {
	pace(now time.Time) time.Duration
	read(now time.Time, n int)
}

func (c *pacedConn) Read(b []byte) (int, error) {
	if c.drained {
		if d := c.p.pace(time.Now()) - time.Since(c.last); d > 0 {
			time.Sleep(d)
		}
	}
	n, err := c.Conn.Read(b)
	now := time.Now()
	c.p.read(now, n)
	c.drained = n < len(b)
	if c.drained {
		c.last = now
	}
	return n, err
}
