package wal

import (
	"fmt"
	"sync"

	"github.com/jackc/pglogrepl"
)

// progress decides how far the slot may be confirmed: never past a
// transaction handed to the caller and not yet acknowledged. Transactions
// are acknowledged in any order; the confirmed position is the end of the
// last transaction before the lowest unsettled one.
type progress struct {
	mu        sync.Mutex
	pending   []pendingTx // handed out or being handed out, in commit order
	confirmed pglogrepl.LSN
	head      pglogrepl.LSN // everything up to here was received; confirmable once pending is empty
}

type pendingTx struct {
	lsn     pglogrepl.LSN
	settled bool
}

func newProgress(start pglogrepl.LSN) *progress {
	return &progress{confirmed: start, head: start}
}

// add records a transaction about to be handed out. Transactions arrive in
// commit order, so pending stays sorted.
func (p *progress) add(lsn pglogrepl.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, pendingTx{lsn: lsn})
	p.head = max(p.head, lsn)
}

// reached records a position received with nothing to hand out before it
// (a keepalive between transactions, a transaction without outbox events).
func (p *progress) reached(lsn pglogrepl.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.head = max(p.head, lsn)
	p.advance()
}

// ack settles the transaction ending at lsn.
func (p *progress) ack(lsn pglogrepl.LSN) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.pending {
		if p.pending[i].lsn == lsn {
			p.pending[i].settled = true
			p.advance()
			return nil
		}
	}
	if lsn <= p.confirmed {
		return nil // acknowledged twice
	}
	return fmt.Errorf("WAL source: ack %s: no transaction handed out ends there", lsn)
}

// advance moves confirmed past the settled prefix of pending, and to head
// when nothing is pending.
func (p *progress) advance() {
	i := 0
	for ; i < len(p.pending) && p.pending[i].settled; i++ {
		p.confirmed = max(p.confirmed, p.pending[i].lsn)
	}
	if i > 0 {
		p.pending = append(p.pending[:0], p.pending[i:]...)
	}
	if len(p.pending) == 0 {
		p.confirmed = max(p.confirmed, p.head)
	}
}

func (p *progress) position() pglogrepl.LSN {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmed
}

// unsettled is how many transactions were handed out and not acknowledged.
func (p *progress) unsettled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}
