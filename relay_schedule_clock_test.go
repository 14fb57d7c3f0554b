package outbox_test

import (
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestScheduledGoesByDatabaseClock: on a server whose clock runs an hour
// behind the relay's, an event scheduled 3 s ahead (Delay, which the
// database resolves) leaves no earlier than 3 s after its write, with both
// sources, and an unscheduled event of the same write leaves at once.
// Before the WAL source read the database's time, it compared deliver_at
// with its own clock and sent the event at once.
func TestScheduledGoesByDatabaseClock(t *testing.T) {
	for _, source := range []outbox.Source{outbox.SourceTable, outbox.SourceWAL} {
		t.Run(string(source), func(t *testing.T) {
			srv := testdb.ClockBehind(t)
			var e *env
			cfg := outbox.RelayConfig{PollInterval: 20 * time.Millisecond}
			if source == outbox.SourceWAL {
				e, _ = setupWALOn(t, srv)
				cfg = walConfig(cfg)
			} else {
				e = setupOn(t, srv)
			}
			var secs float64
			if err := e.pool.QueryRow(ctx(t), `SELECT extract(epoch FROM $1::timestamptz - now())::float8`, time.Now()).Scan(&secs); err != nil {
				t.Fatal(err)
			}
			lag := time.Duration(secs * float64(time.Second))
			if lag < testdb.ClockLag/2 {
				t.Fatalf("the server's clock is %v behind the machine's, want about %v: this would test nothing", lag, testdb.ClockLag)
			}

			mem, st := timed()
			r := e.relay(mem, cfg)
			e.run(r)
			if source == outbox.SourceWAL {
				waitStreaming(t, r, 30*time.Second)
			}
			const delay = 3 * time.Second
			later := event("a", 1)
			later.Delay = delay
			wrote := time.Now()
			ids := e.writeEvents(later, event("b", 1))
			st.waitFor(t, 5*time.Second, ids[1])
			st.waitFor(t, 15*time.Second, ids[0])
			at, _ := st.get(ids[0])
			if early := wrote.Add(delay).Sub(at); early > 0 {
				t.Errorf("the event scheduled %v ahead was published %v early, %v after its write", delay, early, at.Sub(wrote))
			}
		})
	}
}
