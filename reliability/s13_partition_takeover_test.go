package reliability

import (
	"fmt"
	"testing"
	"time"
)

// TestScenario13PartitionTakeover: the network between relay A and
// PostgreSQL freezes and never heals (open connections stay open, no byte
// crosses, new connections hang), while relay B runs. B must deliver
// everything: the rows A held are freed by the server when A's transaction
// outlives idle_in_transaction_session_timeout (publish timeout + 5s), and
// B claims them. Lost 0, no dead letter; A's batches in flight at most are
// published twice and cost an attempt each.
func TestScenario13PartitionTakeover(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	a := e.newRelay("a", relayOpts{workers: 2, batch: 50, publishTimeout: 2 * time.Second})
	b := e.newRelay("b", relayOpts{workers: 2, batch: 50, publishTimeout: 2 * time.Second})
	pa := a.start()
	a.waitPublishing(pa, 30*time.Second)
	pb := b.start()
	b.waitPublishing(pb, 30*time.Second)

	time.Sleep(time.Second)
	before := e.pending()
	a.pg.Partition() // never restored
	partitioned := time.Now()
	aSent := a.nats.Stats().BytesToServer
	time.Sleep(long(10*time.Second, 60*time.Second)) // past A's idle_in_transaction_session_timeout (7s)
	w.stop()
	if _, ok := e.waitDrained(long(time.Minute, 5*time.Minute)); !ok {
		t.Errorf("relay B did not drain with A partitioned: %d pending", e.pending())
	}
	drain := time.Since(partitioned)
	if pb.exited() {
		t.Errorf("relay B exited: %s", tail(pb.stderr.String(), 20))
	}
	if code := b.stopGracefully(); code != 0 {
		t.Errorf("relay b: exit %d after SIGTERM", code)
	}
	aAfter := a.nats.Stats().BytesToServer - aSent
	details := []string{
		fmt.Sprintf("relay A's connections to PostgreSQL frozen for good (%d pending then); relay B drained everything %s after the partition began", before, drain.Round(100*time.Millisecond)),
		fmt.Sprintf("relay A sent %d bytes to the broker after the partition (its batch in flight, heartbeats); its process exited: %v", aAfter, pa.exited()),
		fmt.Sprintf("writers: %d transactions, %d errors", w.txs.Load(), w.errs.Load()),
	}
	a.kill()
	inFlight := 2 * 50 // A's two workers' batches
	e.finish(Row{Key: "13", Scenario: "Relay partitioned from PostgreSQL for good; a second relay takes over",
		Fault: "tcpproxy Partition on relay A's PostgreSQL connections, never healed; relay B running",
		Runs:  1, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: inFlight, Resent: inFlight, Duplicated: inFlight, DeadLetters: 0}})
}
