package wal

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrSlotBusy: another process streams the slot. A standby relay waits
	// and retries; PostgreSQL releases the slot when that process's
	// connection ends (at once when it dies, after wal_sender_timeout when
	// its network vanishes).
	ErrSlotBusy = errors.New("replication slot is in use by another process")
	// ErrSlotLost: the slot does not exist or was invalidated (it kept more
	// WAL than max_slot_wal_keep_size allows). What it had not confirmed is
	// only in the table now: fall back to the table, then start on a fresh
	// slot.
	ErrSlotLost = errors.New("replication slot is missing or invalidated")
	// ErrTimeout: the server sent nothing for StreamConfig.Timeout although
	// asked to reply; the connection is presumed dead.
	ErrTimeout = errors.New("replication stream timed out")
	// ErrClosed: the stream was closed or its context ended.
	ErrClosed = errors.New("replication stream closed")
)

// SlotBusyError is ErrSlotBusy with the slot and the process holding it.
type SlotBusyError struct {
	Slot string
	PID  int // the walsender streaming the slot, 0 if unknown
	Err  error
}

func (e *SlotBusyError) Error() string {
	if e.PID != 0 {
		return fmt.Sprintf("WAL source: replication slot %s is streamed by another process (PID %d)", e.Slot, e.PID)
	}
	return fmt.Sprintf("WAL source: replication slot %s is streamed by another process", e.Slot)
}

func (e *SlotBusyError) Is(target error) bool { return target == ErrSlotBusy }
func (e *SlotBusyError) Unwrap() error        { return e.Err }

var activePID = regexp.MustCompile(`active for PID (\d+)`)

// classify maps a server error about the slot onto the package's errors.
func classify(slot string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "55006": // object_in_use: "replication slot ... is active for PID n"
		be := &SlotBusyError{Slot: slot, Err: err}
		if m := activePID.FindStringSubmatch(pe.Message); m != nil {
			be.PID, _ = strconv.Atoi(m[1])
		}
		return be
	case "42704": // undefined_object: "replication slot ... does not exist"
		return fmt.Errorf("WAL source: slot %s: %w: %w", slot, ErrSlotLost, err)
	case "55000": // object_not_in_prerequisite_state, among others for an invalidated slot
		if strings.Contains(pe.Message, "can no longer get changes") || strings.Contains(pe.Detail, "invalidated") {
			return fmt.Errorf("WAL source: slot %s: %w: %w", slot, ErrSlotLost, err)
		}
	}
	return fmt.Errorf("WAL source: slot %s: %w", slot, err)
}
