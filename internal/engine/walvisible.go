package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgoutbox/outbox/internal/store"
)

// visibleRecheck is the wait between two looks at whether streamed
// commits are visible: the proc array clears within microseconds.
const visibleRecheck = time.Millisecond

// waitVisible waits until the transactions xids are visible to new
// snapshots. The stream hands out a transaction once its commit record is
// flushed, which can be a moment before the committing backend leaves the
// proc array: a DELETE or UPDATE of its rows in that moment would find
// nothing, and the slot would move past rows never settled.
func (s *walSource) waitVisible(ctx context.Context, xids map[uint32]bool) error {
	// Ids below the last snapshot's xmin are visible for good: a backlog
	// needs no query at all.
	for x := range xids {
		if s.horizon.below(x) {
			delete(xids, x)
		}
	}
	if len(xids) == 0 {
		return nil
	}
	e := s.e
	deadline := time.Now().Add(e.cfg.StatementTimeout)
	for {
		var snap string
		sctx, cancel := e.stmtCtx(ctx)
		err := e.pool.QueryRow(sctx, store.Snapshot).Scan(&snap)
		cancel()
		if err != nil {
			return inPhase("snapshot", err)
		}
		ok, err := visibleIn(snap, xids)
		if err != nil || ok {
			if err == nil {
				s.horizon.set(snap)
			}
			return err
		}
		if time.Now().After(deadline) {
			return inPhase("wait for commits to be visible", fmt.Errorf("transactions streamed %s ago are still in progress in snapshot %s", e.cfg.StatementTimeout, snap))
		}
		if !e.sleep(ctx, visibleRecheck, false) {
			return ctx.Err()
		}
	}
}

// horizon is the xmin and xmax of the last snapshot read: every
// transaction id below xmin had completed.
type horizon struct {
	mu         sync.Mutex
	xmin, xmax uint64
}

func (h *horizon) set(snap string) {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) != 3 {
		return
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	h.mu.Lock()
	h.xmin, h.xmax = xmin, xmax
	h.mu.Unlock()
}

// below reports whether the 32-bit id xid is below the last xmin (ids
// within 2^31 of xmax, as every id in use is).
func (h *horizon) below(xid uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.xmax == 0 {
		return false
	}
	x := h.xmax&^0xffffffff | uint64(xid)
	if x >= h.xmax {
		if x-h.xmax < 1<<31 || h.xmax < 1<<32 {
			return false
		}
		x -= 1 << 32
	}
	return x < h.xmin
}

// visibleIn reports whether every 32-bit transaction id in xids is visible
// in snap, a pg_snapshot's text ("xmin:xmax:xip,..."), whose 64-bit ids
// carry the epoch the 32-bit ones lack.
func visibleIn(snap string, xids map[uint32]bool) (bool, error) {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) != 3 {
		return false, fmt.Errorf("WAL source: snapshot %q: want xmin:xmax:xip", snap)
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return false, fmt.Errorf("WAL source: snapshot %q: %w", snap, err)
	}
	inProgress := map[uint64]bool{}
	if parts[2] != "" {
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return false, fmt.Errorf("WAL source: snapshot %q: %w", snap, err)
			}
			inProgress[x] = true
		}
	}
	for xid := range xids {
		x := xmax&^0xffffffff | uint64(xid)
		if x >= xmax {
			if x-xmax < 1<<31 || xmax < 1<<32 {
				return false, nil // not completed, as this snapshot sees it
			}
			x -= 1 << 32 // an id of the previous epoch
		}
		if x >= xmin && inProgress[x] {
			return false, nil
		}
	}
	return true, nil
}
