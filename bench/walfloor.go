package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/wal"
)

// The WAL drain's floor: what the server itself takes to decode the
// backlog, measured in the same run on a copy of the relay's slot made at
// the same point (before the fill), so that both see the same WAL. The
// copy is decoded by pg_logical_slot_peek_binary_changes with pgoutput and
// the relay's publication, in one backend, with nothing sent over a
// network: a walsender streaming to the relay does this decoding and
// more. The floor runs before the relay drains, so the two never compete
// for the CPU.

// copySlot copies schema's WAL source slot (pg_copy_logical_replication_slot)
// to a slot the harness drops after timing it, and in any case on close.
func (h *harness) copySlot(ctx context.Context, schema string) (string, error) {
	h.seq++
	// pgoutbox_<prefix>_…: the tests' leftover check looks for this.
	name := fmt.Sprintf("pgoutbox_%s_floor_%d", h.prefix, h.seq)
	h.floors = append(h.floors, name)
	if _, err := h.pool.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2)`, h.slotName(schema), name); err != nil {
		return name, fmt.Errorf("copy slot %s: %w", h.slotName(schema), err)
	}
	return name, nil
}

// dropFloor drops a floor slot (if it is still there).
func (h *harness) dropFloor(ctx context.Context, slot string) {
	if !slices.Contains(h.floors, slot) {
		return
	}
	if _, err := h.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot); err != nil {
		h.logf("drop the floor slot %s: %v", slot, err)
		return
	}
	h.floors = slices.DeleteFunc(h.floors, func(x string) bool { return x == slot })
}

// floorResult is one timing of the server's decoding.
type floorResult struct {
	rate     float64 // events/s
	elapsed  time.Duration
	messages int64   // pgoutput messages: BEGIN, RELATION, INSERT, COMMIT …
	inserts  int64   // of which INSERTs ('I'): the events
	cpuUS    float64 // the decoding backend's CPU per event, µs
}

// decodeFloorSQL decodes every change of the slot (without consuming it)
// as the relay's walsender would, counting the messages and the inserts
// (pgoutput's first byte is the message type).
const decodeFloorSQL = `SELECT count(*), count(*) FILTER (WHERE get_byte(data, 0) = 73)
FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)`

// decodeFloor times decodeFloorSQL on slot, for schema's publication.
func (h *harness) decodeFloor(ctx context.Context, schema, slot string, n int) (floorResult, error) {
	var fr floorResult
	names, err := ident.New(schema, "")
	if err != nil {
		return fr, err
	}
	pub := wal.NamesFor(names, h.pool.Config().ConnConfig.Database).Publication
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return fr, err
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return fr, err
	}
	cpu0 := procCPU(pid)
	start := time.Now()
	if err := conn.QueryRow(ctx, decodeFloorSQL, slot, pub).Scan(&fr.messages, &fr.inserts); err != nil {
		return fr, err
	}
	fr.elapsed = time.Since(start)
	if cpu1 := procCPU(pid); cpu0 >= 0 && cpu1 >= 0 {
		fr.cpuUS = (cpu1 - cpu0) / float64(n) * 1e6
	}
	fr.rate = float64(n) / fr.elapsed.Seconds()
	return fr, nil
}
