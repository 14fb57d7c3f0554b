package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// TestWALFallbackBehindLongTransaction: a fresh slot waits for every write
// transaction open on the server, however unrelated. While it waits, the
// relay hands the pending rows to the table path: events written after the
// slot was lost are delivered within seconds, not once the long transaction
// ends (before: nothing for as long as it lasted).
func TestWALFallbackBehindLongTransaction(t *testing.T) {
	e, n := setupWAL(t)
	mem := memory.New()
	r := e.relay(mem, walConfig(outbox.RelayConfig{}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	e.execSQL(`CREATE TABLE side (x int)`)
	tx, err := e.pool.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx(t), `INSERT INTO side VALUES (1)`); err != nil { // takes an xid
		t.Fatal(err)
	}
	dropSlotUnder(t, e.pool, n.Slot)
	e.write(5)
	c, cancel := context.WithTimeout(ctx(t), 15*time.Second)
	defer cancel()
	if err := mem.WaitDistinct(c, 5); err != nil {
		t.Fatalf("%d of 5 events delivered within 15 s while a transaction holds the fresh slot back: %v", mem.Distinct(), err)
	}
	if r.SourceStatus().Streaming {
		t.Fatal("streaming again while the transaction is open: the fresh slot did not wait, so this tested nothing")
	}
	if err := tx.Rollback(ctx(t)); err != nil {
		t.Fatal(err)
	}
	waitStreaming(t, r, 30*time.Second)
	e.write(3)
	if err := mem.WaitDistinct(ctx(t), 8); err != nil {
		t.Fatalf("after the transaction ended: %d of 8 delivered: %v", mem.Distinct(), err)
	}
}
