package testdb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicationObjects registers a replication slot and a publication that
// the test is about to create, and checks at cleanup that the test removed
// the slot: a slot left behind keeps every byte of WAL the server writes
// from then on, so a leaked slot fails the test (and is dropped, along with
// the publication, so one failure does not fill the disk).
//
// Call it before the test registers its own cleanup that drops them:
// cleanups run last-registered first, so the check runs after the test's
// own drop.
func ReplicationObjects(t testing.TB, slot, publication string) {
	t.Helper()
	Shared().ReplicationObjects(t, slot, publication)
}

// ReplicationObjects is the package's ReplicationObjects on server s.
func (s *Server) ReplicationObjects(t testing.TB, slot, publication string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.url)
		if err != nil {
			t.Errorf("testdb: connect to check slot %s: %v", slot, err)
			return
		}
		defer conn.Close(ctx)
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&exists); err != nil {
			t.Errorf("testdb: check slot %s: %v", slot, err)
			return
		}
		if exists {
			t.Errorf("testdb: the test left replication slot %s behind (a leaked slot retains WAL forever); dropping it", slot)
			if err := dropSlot(ctx, conn, slot); err != nil {
				t.Errorf("testdb: drop leaked slot %s: %v", slot, err)
			}
		}
		if publication != "" {
			if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{publication}.Sanitize()); err != nil {
				t.Errorf("testdb: drop publication %s: %v", publication, err)
			}
		}
	})
}

// dropSlot drops slot, terminating the process streaming it and retrying
// until PostgreSQL has released it.
func dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	for {
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil || !strings.Contains(err.Error(), "is active") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DatabaseName is the name of the test database (TEST_DATABASE_URL's),
// which the WAL source's slot names include.
func DatabaseName() string { return Shared().DatabaseName() }

// DatabaseName is the name of s's test database.
func (s *Server) DatabaseName() string {
	cfg, err := pgx.ParseConfig(s.url)
	if err != nil {
		return ""
	}
	return cfg.Database
}
