package engine

import (
	"math"
	"sync"
	"time"
)

// cursor keeps the claim's index scan off the dead head of the ready index.
//
// Every row the relay marks (or deletes) leaves its entry in the partial
// ready index until VACUUM removes it, and a claim that scans the index
// from its start steps over all of them: after a long drain, each claim
// walks every dead entry the drain left, and the drain slows as it goes.
// So claims scan from a floor, `seq > floor`, below which no claimable row
// is expected.
//
// A seq is assigned at INSERT and becomes visible at COMMIT, so a row may
// appear below seqs already claimed; retries come due below the floor;
// another relay's rolled-back batch reappears below it. None of them is lost:
//
//   - the floor is at most the highest seq claimed at least lag ago, so a
//     transaction that commits within lag of its INSERT is seen by ordinary
//     claims;
//   - in ordered mode the floor is also at most just below the lowest row
//     that was pending and not waiting for a retry at the last full scan,
//     because an aggregate's next event becomes claimable below rows already
//     claimed as soon as its predecessor is published;
//   - every rescan interval, one claim scans from the start (seq > 0), and
//     picks up whatever the floor passed over. While such a claim comes
//     back full, the next one continues from its last row (a sweep) instead
//     of going back to the floor, so a large transaction that committed
//     late drains back to back, not one batch per rescan interval. A row
//     below the floor waits at most one rescan interval more than it would
//     without the floor.
type cursor struct {
	lag    time.Duration // unordered: how old a claimed maximum must be to become the floor
	rescan time.Duration // how often a claim scans from the start

	mu       sync.Mutex
	lagFloor int64   // the highest claimed maximum at least lag old
	lowFloor int64   // ordered: just below the low water of the last full scan; unordered: no bound
	maxima   []seqAt // claimed maxima younger than lag, increasing
	lastFull time.Time
	sweeping bool  // a rescan came back full: claims continue below the floor
	sweep    int64 // sweeping: where the next claim continues from
}

// pass is where one claim starts.
type pass struct {
	floor  int64 // claim rows with seq above it
	rescan bool  // the claim scans from the start (floor 0)
	sweep  bool  // the claim is a rescan or continues one, below the floor
}

type seqAt struct {
	seq int64
	at  time.Time
}

func newCursor(rescan time.Duration, ordered bool) *cursor {
	c := &cursor{lag: rescan / 4, rescan: rescan}
	if !ordered {
		c.lowFloor = math.MaxInt64
	}
	return c
}

func (c *cursor) floorLocked() int64 { return min(c.lagFloor, c.lowFloor) }

// next returns where a claim starting now starts: the rescan from the start
// (floor 0), which one claim per interval is, the continuation of a sweep,
// or the floor.
func (c *cursor) next(now time.Time) pass {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for i < len(c.maxima) && now.Sub(c.maxima[i].at) >= c.lag {
		c.lagFloor = max(c.lagFloor, c.maxima[i].seq)
		i++
	}
	c.maxima = c.maxima[:copy(c.maxima, c.maxima[i:])]
	if c.lastFull.IsZero() || now.Sub(c.lastFull) >= c.rescan {
		c.lastFull = now
		c.sweeping, c.sweep = false, 0
		return pass{rescan: true, sweep: true}
	}
	if c.sweeping {
		return pass{floor: c.sweep, sweep: true}
	}
	return pass{floor: c.floorLocked()}
}

// swept records how a sweep claim (p.sweep) ended: full, with last the
// highest seq it returned. A full claim below the floor continues the sweep
// from last; a short one, or one that reached the floor, ends it.
func (c *cursor) swept(p pass, full bool, last int64) {
	if !p.sweep {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if full && last < c.floorLocked() {
		c.sweeping, c.sweep = true, max(c.sweep, last)
		return
	}
	c.sweeping = false
}

// claimed records the highest seq a claim that started at at returned. It
// bounds the floor once it is lag old.
func (c *cursor) claimed(at time.Time, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.maxima)
	switch {
	case seq <= c.lagFloor || (n > 0 && seq <= c.maxima[n-1].seq):
		return
	case n > 0 && at.Sub(c.maxima[n-1].at) < c.lag/8:
		// Coalesce: a handful of entries per lag, however many claims.
		c.maxima[n-1].seq = seq
	default:
		c.maxima = append(c.maxima, seqAt{seq, at})
	}
}

// setLowWater bounds the floor by a full scan's reading (ordered mode): low
// is the lowest seq pending and not waiting for a retry, or 0 if there is
// none, in which case only the lag bounds the floor.
func (c *cursor) setLowWater(low int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if low > 0 {
		c.lowFloor = low - 1
		return
	}
	c.lowFloor = math.MaxInt64
}

// reset makes the next claim a rescan from the start, e.g. after this
// process rolled back a batch whose rows are below the floor.
func (c *cursor) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastFull = time.Time{}
}

// Floor is the current claim floor, for tests.
func (e *Engine) Floor() int64 {
	e.cur.mu.Lock()
	defer e.cur.mu.Unlock()
	return e.cur.floorLocked()
}
