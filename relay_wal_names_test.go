package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/wal"
	"github.com/pgoutbox/outbox/memory"
)

// walDatabase is a database of its own with the default outbox_events
// table migrated in public, its pool, and its WAL source's names.
func walDatabase(t *testing.T) (*pgxpool.Pool, wal.Names) {
	t.Helper()
	srv := testdb.Logical(t)
	dsn := srv.Database(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{}); err != nil {
		t.Fatal(err)
	}
	in, err := ident.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	n := wal.NamesFor(in, cfg.ConnConfig.Database)
	srv.ReplicationObjects(t, n.Slot, "")
	srv.ReplicationObjects(t, n.LegacySlot, "")
	return pool, n
}

var legacySlotMu sync.Mutex

// legacyTurn makes the tests that create the legacy slot take turns: its
// name is the same in every database and slot names are cluster-wide. Call
// it first, so that the turn ends after every cleanup of the test.
func legacyTurn(t *testing.T) {
	legacySlotMu.Lock()
	t.Cleanup(legacySlotMu.Unlock)
}

// legacySlot creates the table's publication and slot as versions before
// the database was in the slot's name did.
func legacySlot(t *testing.T, pool *pgxpool.Pool, n wal.Names) {
	t.Helper()
	old := n
	old.Slot = n.LegacySlot
	if _, err := wal.Create(ctx(t), pool, old); err != nil {
		t.Fatal(err)
	}
	if err := wal.DropTableSourceIndexes(ctx(t), pool, old); err != nil {
		t.Fatal(err)
	}
}

func slotExists(t *testing.T, pool *pgxpool.Pool, slot string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(ctx(t), `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// startWALRelay runs a WAL relay on pool's default table into a memory
// publisher until the test ends, once it streams.
func startWALRelay(t *testing.T, pool *pgxpool.Pool) (*outbox.Relay, *memory.Publisher, func()) {
	t.Helper()
	mem := memory.New()
	r, err := outbox.NewRelay(pool, mem, walConfig(outbox.RelayConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	waitStreaming(t, r, 30*time.Second)
	return r, mem, stop
}

func plainInserts(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	for range n {
		if _, err := pool.Exec(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', 'o-1', 'order.created', '{}')`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALSourceTwoDatabases: two databases on one server, each with the
// default outbox_events, get a slot each, although one of them still has a
// slot of the name older versions gave (which was the same in both): each
// relay streams its own database's events, and dropping one database's
// WAL source leaves the other's slot and stream alone.
func TestWALSourceTwoDatabases(t *testing.T) {
	t.Parallel()
	legacyTurn(t)
	pool1, n1 := walDatabase(t)
	pool2, n2 := walDatabase(t)
	if n1.Slot == n2.Slot || n1.LegacySlot != n2.LegacySlot {
		t.Fatalf("slots %s and %s (legacy %s, %s)", n1.Slot, n2.Slot, n1.LegacySlot, n2.LegacySlot)
	}
	legacySlot(t, pool1, n1) // an upgraded deployment in the first database
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := outbox.DropReplication(c, pool1, outbox.MigrateConfig{}); err != nil {
			t.Errorf("DropReplication: %v", err)
		}
	})
	info, err := outbox.SetupReplication(ctx(t), pool2, outbox.MigrateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Created || info.Slot != n2.Slot {
		t.Fatalf("second database: %+v, want its own slot %s created", info, n2.Slot)
	}
	r1, mem1, _ := startWALRelay(t, pool1)
	r2, mem2, stop2 := startWALRelay(t, pool2)
	if r1.SourceStatus().Slot != n1.LegacySlot || r2.SourceStatus().Slot != n2.Slot {
		t.Fatalf("relays stream %s and %s, want %s and %s", r1.SourceStatus().Slot, r2.SourceStatus().Slot, n1.LegacySlot, n2.Slot)
	}
	plainInserts(t, pool1, 3)
	plainInserts(t, pool2, 5)
	if err := mem1.WaitDistinct(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	if err := mem2.WaitDistinct(ctx(t), 5); err != nil {
		t.Fatal(err)
	}
	stop2()
	if err := outbox.DropReplication(ctx(t), pool2, outbox.MigrateConfig{}); err != nil {
		t.Fatal(err)
	}
	if slotExists(t, pool1, n2.Slot) || !slotExists(t, pool1, n1.LegacySlot) {
		t.Fatalf("after the second database's drop: its slot exists %v, the first's %v",
			slotExists(t, pool1, n2.Slot), slotExists(t, pool1, n1.LegacySlot))
	}
	plainInserts(t, pool1, 1)
	if err := mem1.WaitDistinct(ctx(t), 4); err != nil {
		t.Fatalf("the first database's relay stopped streaming: %v", err)
	}
	if mem1.Len() != 4 || mem2.Len() != 5 {
		t.Errorf("published %d and %d messages, want 4 and 5", mem1.Len(), mem2.Len())
	}
}

// TestWALSourceAdoptsLegacySlot: a relay upgraded from a version that named
// the slot without the database streams that slot from its confirmed
// position: the events committed while no relay ran are delivered, nothing
// is lost, and no second slot is created.
func TestWALSourceAdoptsLegacySlot(t *testing.T) {
	t.Parallel()
	legacyTurn(t)
	pool, n := walDatabase(t)
	legacySlot(t, pool, n)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := outbox.DropReplication(c, pool, outbox.MigrateConfig{}); err != nil {
			t.Errorf("DropReplication: %v", err)
		}
	})
	plainInserts(t, pool, 3) // written after the old relay stopped
	r, mem, stop := startWALRelay(t, pool)
	if got := r.SourceStatus().Slot; got != n.LegacySlot {
		t.Fatalf("streams %s, want the legacy slot %s", got, n.LegacySlot)
	}
	if err := mem.WaitDistinct(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	stop()
	plainInserts(t, pool, 2)
	_, mem2, _ := startWALRelay(t, pool)
	if err := mem2.WaitDistinct(ctx(t), 2); err != nil {
		t.Fatal(err)
	}
	if slotExists(t, pool, n.Slot) {
		t.Errorf("a second slot %s was created beside the legacy one", n.Slot)
	}
	// CheckReplication and SetupReplication see the adopted slot as the
	// table's: no slot created, none needed.
	info, err := outbox.SetupReplication(ctx(t), pool, outbox.MigrateConfig{})
	if err != nil || info.Created || info.Slot != n.LegacySlot {
		t.Errorf("SetupReplication = %+v, %v; want the legacy slot, not created", info, err)
	}
}
