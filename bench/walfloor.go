package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
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

// publication is the name of schema's WAL source publication.
func (h *harness) publication(schema string) (string, error) {
	names, err := ident.New(schema, "")
	if err != nil {
		return "", err
	}
	return wal.NamesFor(names, h.pool.Config().ConnConfig.Database).Publication, nil
}

// decodeFloor times decodeFloorSQL on slot, for schema's publication.
func (h *harness) decodeFloor(ctx context.Context, schema, slot string, n int) (floorResult, error) {
	var fr floorResult
	pub, err := h.publication(schema)
	if err != nil {
		return fr, err
	}
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

// The pg_recvlogical row: the same backlog streamed by a walsender to
// PostgreSQL's own client, which reads as fast as it can, writes what it
// receives to /dev/null and confirms only at the end. It is what streaming
// costs the server with the simplest reader, beside the decode floor's
// decoding alone. How a reader reads changes that cost: one that reads
// whenever data arrives makes the walsender send more often. It runs on a
// second copy of the slot, before the relay drains.

// streamFloor streams slot to pg_recvlogical until the server's WAL
// position as of now, timing it, with the walsender's CPU per event.
func (h *harness) streamFloor(ctx context.Context, schema, slot string, n int) (floorResult, error) {
	var fr floorResult
	pub, err := h.publication(schema)
	if err != nil {
		return fr, err
	}
	var end string
	if err := h.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		return fr, err
	}
	app := "pgoutbox-bench-stream-floor"
	cmd := exec.CommandContext(ctx, "pg_recvlogical", "--dbname", h.opt.DatabaseURL, "--slot", slot, "--start",
		"--endpos", end, "--no-loop", "--file", "/dev/null", "--status-interval", "10", "--fsync-interval", "0",
		"-o", "proto_version=1", "-o", "publication_names="+pub)
	cmd.Env = append(os.Environ(), "PGAPPNAME="+app)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fr, fmt.Errorf("pg_recvlogical (Debian package postgresql-client): %w", err)
	}
	// The walsender's CPU, read until pg_recvlogical exits: by its pid,
	// once it shows.
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	pid, cpu := 0, -1.0
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				return fr, fmt.Errorf("pg_recvlogical: %w: %s", err, strings.TrimSpace(stderr.String()))
			}
			waiting = false
		case <-tick.C:
			if pid == 0 {
				_ = h.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'walsender'`, app).Scan(&pid)
			}
			if c := procCPU(pid); pid != 0 && c >= 0 {
				cpu = c
			}
		}
	}
	fr.elapsed = time.Since(start)
	fr.rate = float64(n) / fr.elapsed.Seconds()
	if cpu >= 0 {
		fr.cpuUS = cpu / float64(n) * 1e6
	}
	return fr, nil
}
