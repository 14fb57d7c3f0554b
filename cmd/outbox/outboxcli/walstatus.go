package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/wal"
)

// slotStatus is the WAL source's replication slot, as outbox status shows
// it (the "source" object of --json). A lost slot has no restart
// position, hence no retained bytes (nil).
type slotStatus struct {
	Slot string `json:"slot"`
	// Active: a relay streams the slot now; ActivePID is its walsender.
	Active    bool   `json:"active"`
	ActivePID *int32 `json:"active_pid,omitempty"`
	// WALStatus is reserved, extended, unreserved or lost.
	WALStatus string `json:"wal_status"`
	Confirmed string `json:"confirmed_flush_lsn,omitempty"`
	// LagBytes: WAL written since the slot's confirmed position
	// (pg_current_wal_lsn() - confirmed_flush_lsn), how far the WAL source
	// is behind; the relay's outbox_replication_lag_bytes.
	LagBytes int64 `json:"lag_bytes"`
	// RetainedBytes: WAL the slot keeps on the server's disk
	// (pg_current_wal_lsn() - restart_lsn); outbox_replication_retained_bytes.
	RetainedBytes *int64 `json:"retained_bytes"`
}

// readSlot returns the table's WAL slot, or nil when it does not exist (the
// table source, or the WAL source not set up), under the deadline of
// outbox status's other statements.
func readSlot(ctx context.Context, pool *pgxpool.Pool, d *dbOptions) (*slotStatus, error) {
	in, err := ident.New(d.Schema, d.Table)
	if err != nil {
		return nil, flagError(err)
	}
	timeout := adminTimeout(pool.Config(), d.StatementTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := wal.Resolve(ctx, pool, in)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	fail := func(err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cc := pool.Config().ConnConfig
			return &admin.StatementTimeoutError{Op: "status", Timeout: timeout, Err: err,
				Database: fmt.Sprintf("%s/%s", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), cc.Database)}
		}
		return fmt.Errorf("status: WAL source slot %s: %w", n.Slot, err)
	}
	st, err := wal.Inspect(ctx, pool, n)
	if err != nil {
		return nil, fail(err)
	}
	if !st.Exists {
		return nil, nil
	}
	s := &slotStatus{Slot: n.Slot, Active: st.Active, WALStatus: st.WALStatus}
	if st.Active {
		s.ActivePID = &st.ActivePID
	}
	if st.ConfirmedFlush != 0 {
		s.Confirmed = st.ConfirmedFlush.String()
	}
	// Inspect reads NULL retained WAL (a lost slot) as 0; lost is the only
	// status without a restart position. (Inspect's LagBytes is what the
	// slot retains; its BehindBytes is the lag.)
	if st.WALStatus != "lost" {
		s.RetainedBytes = &st.LagBytes
	}
	s.LagBytes = st.BehindBytes
	return s, nil
}

// adminTimeout is admin.Admin's statement deadline for a pool and
// --statement-timeout: the flag, else the connection string's
// statement_timeout plus 5s, else admin.DefaultStatementTimeout.
func adminTimeout(cfg *pgxpool.Config, flag time.Duration) time.Duration {
	if flag > 0 {
		return flag
	}
	if v, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return time.Duration(ms)*time.Millisecond + 5*time.Second
		}
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d + 5*time.Second
		}
	}
	return admin.DefaultStatementTimeout
}

// print writes the slot as outbox status's "source" section.
func (s *slotStatus) print(w io.Writer) {
	fmt.Fprintf(w, "\nsource: WAL, replication slot %s\n", s.Slot)
	if s.Active && s.ActivePID != nil {
		fmt.Fprintf(w, "  streamed by       walsender pid %d (active)\n", *s.ActivePID)
	} else {
		fmt.Fprintf(w, "  streamed by       no relay (inactive): the slot keeps WAL until one streams it\n")
	}
	fmt.Fprintf(w, "  wal_status        %s\n", s.WALStatus)
	if s.Confirmed != "" {
		fmt.Fprintf(w, "  confirmed         %s\n", s.Confirmed)
	}
	fmt.Fprintf(w, "  lag               %s (WAL written since the confirmed position)\n", byteSize(&s.LagBytes))
	fmt.Fprintf(w, "  retained          %s (WAL the slot keeps on the server's disk)\n", byteSize(s.RetainedBytes))
}

// byteSize formats a byte count for people, exact below 1 KiB; "-" for
// NULL.
func byteSize(n *int64) string {
	if n == nil {
		return "-"
	}
	v := *n
	const unit = 1024
	if v < unit && v > -unit {
		return fmt.Sprintf("%d B", v)
	}
	f, i := float64(v), -1
	for (f >= unit || f <= -unit) && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}
