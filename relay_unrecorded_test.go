package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestUnrecordedPublishesBackOff: when the table refuses the mark (here a
// trigger; behind PgBouncer it was a parameter the connection could not
// send), the events the broker confirmed stay pending. Before, the relay
// published them again at every claim, each worker on its own, with
// attempts at 0. Now it counts them (outbox_unrecorded_total), Ready says
// why, and all workers back off longer at each failure: a few copies per
// event, not one per poll. Once the mark works again every event is
// recorded and the copies stop.
func TestUnrecordedPublishesBackOff(t *testing.T) {
	e := setup(t)
	e.execSQL(`CREATE FUNCTION refuse_mark() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'outbox rows are read-only (test)'; END $$`)
	e.execSQL(`CREATE TRIGGER refuse_mark BEFORE UPDATE OR DELETE ON outbox_events
FOR EACH ROW EXECUTE FUNCTION refuse_mark()`)
	mem := memory.New()
	reg := prometheus.NewRegistry()
	r := e.relay(mem, outbox.RelayConfig{Workers: 2, PollInterval: 10 * time.Millisecond, Registerer: reg,
		OutageBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	sig := outbox.Signals(r)
	sig.Init()
	e.write(5)
	e.run(r)

	var err error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Ready = %v", err) }), 15*time.Second, "Ready failing with the mark's error", func() bool {
		err = r.Ready(ctx(t))
		return err != nil && strings.Contains(err.Error(), "published but not recorded")
	})
	if err == nil || !strings.Contains(err.Error(), "published but not recorded") || !strings.Contains(err.Error(), "read-only (test)") || errors.Is(err, outbox.ErrStuck) {
		t.Fatalf("Ready = %v, want the mark's error", err)
	}
	// The first wait is a second; the ones after, longer. With the old
	// per-poll retries, 4 s saw hundreds of copies of each event.
	time.Sleep(4 * time.Second)
	perEvent := 0
	for _, n := range mem.Count() {
		perEvent = max(perEvent, n)
	}
	if perEvent < 2 || perEvent > 4 {
		t.Errorf("an event was published %d times in 4 s of refused marks, want 2 to 4 (1 s, 2 s backoff)", perEvent)
	}
	if got := gauge(t, reg, "outbox_unrecorded_total"); got < float64(5*perEvent-5) {
		t.Errorf("outbox_unrecorded_total = %v, want every unrecorded copy counted (%d per event)", got, perEvent)
	}
	if n := e.count("processed_at IS NULL AND attempts = 0"); n != 5 {
		t.Errorf("%d of 5 events still pending, want all: a refused mark records nothing", n)
	}

	e.execSQL(`DROP TRIGGER refuse_mark ON outbox_events`)
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d still pending", e.count("processed_at IS NULL")) }), 30*time.Second,
		"every event recorded once the mark works again", func() bool { return e.count("processed_at IS NULL") == 0 })
	if err := r.Ready(ctx(t)); err != nil {
		t.Errorf("Ready = %v once marks work again", err)
	}
	before := mem.Len()
	sig.Idle.Drain()
	sig.Idle.WaitN(t, 5, 10*time.Second)
	if after := mem.Len(); after != before {
		t.Errorf("%d more publishes after every event was recorded", after-before)
	}
}
