package outbox

import "fmt"

// Source is where a relay finds the events to publish (RelayConfig.Source).
type Source string

const (
	// SourceTable claims events from the outbox table (FOR UPDATE SKIP
	// LOCKED), marks them once published, and finds new ones by polling
	// (and LISTEN, with Listen). It works on any PostgreSQL and with any
	// role that may read and update the table.
	SourceTable Source = "table"
	// SourceWAL streams committed events from a logical replication slot
	// (pgoutput) in commit order: no claim, no lock and no per-event
	// UPDATE; published rows are deleted in bulk, then the slot is
	// acknowledged. A failed publish is handed to the table, where the
	// table source's machinery retries and dead-letters it. It needs
	// wal_level=logical, a role with REPLICATION, and the publication and
	// slot that `outbox migrate --source wal` creates. See docs/WAL.md.
	SourceWAL Source = "wal"
)

func (s Source) valid() error {
	switch s {
	case SourceTable, SourceWAL:
		return nil
	}
	return fmt.Errorf("%q: want %q or %q", string(s), SourceTable, SourceWAL)
}

// SourceStatus is what a relay's source is doing now, for health checks
// and status pages.
type SourceStatus struct {
	// Source is the configured source.
	Source Source
	// Active is the source events come from now: SourceTable while a WAL
	// relay falls back after losing its slot.
	Active Source
	// Slot is the replication slot (WAL source).
	Slot string
	// Streaming: this relay holds the slot and streams it (WAL source).
	Streaming bool
	// Standby: another process streams the slot; this relay takes over
	// when it is freed, and meanwhile relays only the table's handed-over
	// events (WAL source).
	Standby bool
	// Confirmed is the slot's position this relay last confirmed, as
	// PostgreSQL prints an LSN ("0/16B3748"); empty if none.
	Confirmed string
	// Err is why the source is not streaming, if it should be.
	Err error
}

// SourceStatus reports what the relay's source is doing now.
func (r *Relay) SourceStatus() SourceStatus {
	st := r.eng.SourceState()
	s := SourceStatus{Source: SourceTable, Active: SourceTable, Slot: st.Slot, Streaming: st.Streaming,
		Standby: st.Standby, Confirmed: st.Confirmed, Err: st.Err}
	if r.cfg.WAL {
		s.Source = SourceWAL
		if !st.Fallback {
			s.Active = SourceWAL
		}
	}
	return s
}
