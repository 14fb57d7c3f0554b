package wal

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// On a server of the test's own: the wal_level check against a real
// wal_level=replica, a stream across a server restart, and a slot the
// server invalidated.
func TestPrivateServer(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	in, err := ident.New("", "outbox_events")
	if err != nil {
		t.Fatal(err)
	}
	n := NamesFor(in, "postgres")

	c.start("wal_level=replica")
	err = Check(ctx, c.connect(), n)
	var pe *PrereqError
	if !errors.As(err, &pe) || pe.Setting != "wal_level" || !strings.Contains(err.Error(), `"replica"`) {
		t.Fatalf("check with wal_level=replica: %v", err)
	}

	c.start("wal_level=logical", "max_slot_wal_keep_size=1MB")
	db := c.connect()
	if _, err := db.Exec(ctx, `CREATE TABLE outbox_events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_type text NOT NULL,
		aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	if err := Check(ctx, db, n); err != nil {
		t.Fatalf("check with wal_level=logical: %v", err)
	}
	if _, err := Create(ctx, db, n); err != nil {
		t.Fatal(err)
	}
	insert := func(et string) {
		t.Helper()
		if _, err := c.connect().Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', '1', $1, '{}')`, et); err != nil {
			t.Fatal(err)
		}
	}
	cfg := StreamConfig{ConnString: c.url(), Names: n, StatusInterval: 50 * time.Millisecond, Timeout: 5 * time.Second}
	open := func() *Stream {
		t.Helper()
		s, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}

	t.Run("restart", func(t *testing.T) {
		s := open()
		insert("e1")
		insert("e2")
		e1, e2 := next(t, s), next(t, s)
		if err := s.Ack(e1.LSN); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "a status report carrying the ack", func() bool {
			var ok bool
			if err := db.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`,
				e1.LSN.String(), n.Slot).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			return ok
		})
		c.start("wal_level=logical", "max_slot_wal_keep_size=1MB")
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the stream outlived the server")
		}
		if _, err := s.Next(ctx); err == nil || errors.Is(err, ErrClosed) {
			t.Fatalf("Next after the server went away: %v, want the connection's error", err)
		}
		// The shutdown must not wait for e2's acknowledgement (it did, for
		// as long as the stream stayed connected, before the stream learnt
		// to report no flush position when asked). After it, e2 comes again;
		// e1 may too: PostgreSQL before 17 does not write a slot's confirmed
		// position at the shutdown checkpoint unless something else changed.
		s = open()
		got := next(t, s)
		if got.LSN == e1.LSN {
			got = next(t, s)
		}
		if !slices.Equal(eventTypes(got), []string{"e2"}) || got.LSN != e2.LSN {
			t.Fatalf("after the restart got %v, want the unacknowledged [e2]", eventTypes(got))
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("invalidated", func(t *testing.T) {
		db := c.connect() // the restart ended the first connection
		// With the slot inactive, write past max_slot_wal_keep_size and
		// checkpoint: the server gives up the slot's WAL.
		for range 4 {
			insert("filler")
			if _, err := db.Exec(ctx, "SELECT pg_switch_wal()"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Exec(ctx, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		st, err := Inspect(ctx, db, n)
		if err != nil || st.WALStatus != "lost" {
			t.Fatalf("slot after the checkpoint: %+v, %v; want wal_status lost", st, err)
		}
		if _, err := Open(ctx, cfg); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("open an invalidated slot: %v, want ErrSlotLost", err)
		}
		if err := Drop(ctx, db, n); err != nil {
			t.Fatal(err)
		}
	})
}
