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
type pacer struct {
	max   time.Duration // StreamConfig.Pace; 0 never paces
	above float64       // StreamConfig.PaceAbove, transactions/s
	w     rate.Window   // transactions decoded; the stream's goroutine only
}

// commit records a transaction at now.
func (p *pacer) commit(now time.Time) {
	if p.max > 0 {
		p.w.Add(now, 1)
	}
}

// pace is the shortest time between two reads: none up to above
// transactions/s, rising linearly to max at twice that rate.
func (p *pacer) pace(now time.Time) time.Duration {
	if p.max <= 0 {
		return 0
	}
	return time.Duration(rate.Ramp(p.w.Rate(now), p.above) * float64(p.max))
}

// pacedConn is the stream's connection: a read that follows one that
// emptied the socket waits until the pace has passed since it. A read that
// filled the caller's buffer found more than it could take and is followed
// at once, and an idle stream's first read returns as soon as data arrives,
// so pacing adds at most one pace to an event's latency, and only under a
// heavy stream. Only the stream's goroutine reads.
type pacedConn struct {
	net.Conn
	pace    func(now time.Time) time.Duration
	last    time.Time // end of the last read that emptied the socket
	drained bool      // the last read returned less than asked
}

func (c *pacedConn) Read(b []byte) (int, error) {
	if c.drained {
		if d := c.pace(time.Now()) - time.Since(c.last); d > 0 {
			time.Sleep(d)
		}
	}
	n, err := c.Conn.Read(b)
	c.drained = n < len(b)
	if c.drained {
		c.last = time.Now()
	}
	return n, err
}
