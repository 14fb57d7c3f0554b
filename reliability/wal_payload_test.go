package reliability

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestWALLargePayloadsBrokerDown (row 15i): a WAL relay streams while its
// broker is down and ten 30 MB events are committed, one per transaction;
// then the broker comes back. The stream decodes ahead of the relay's
// batches only up to the byte budget (MaxBatchBytes, 16 MiB by default), so
// the relay's memory holds a few large events, not every one committed
// during the outage. Run with GOMEMLIMIT as the manifests set it; asserted:
// under 256 MiB, everything delivered. The same run with the budget lifted
// (--max-batch-bytes 1 GiB, long version only) shows what the stream
// would hold; it is reported, not asserted.
func TestWALLargePayloadsBrokerDown(t *testing.T) {
	t.Parallel()
	slot(t)
	const (
		big      = 10
		bigSize  = 30 << 20
		rssLimit = 256 << 10 // kB
	)
	run := func(extra ...string) (e *env, peakDown, peak int64, drain time.Duration) {
		e = newEnv(t, envOpts{wal: true, cluster: walCluster(t), nats: natsOpts{maxPayload: 40 << 20}})
		r := e.newRelay("wal", relayOpts{batch: 100, workers: 1, extra: extra, env: map[string]string{"GOMEMLIMIT": "160MiB"}})
		p := r.start()
		for start := time.Now(); !e.slotInfo(ctxT(t, 10*time.Second)).active; time.Sleep(50 * time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("relay %s did not stream slot %s within 30 s", r.name, e.walSlot)
			}
		}
		e.nats.stop(false)
		rec := e.writeBig(big, bigSize)
		e.hist.Record(Committed, rec...)
		// The stream decodes while the broker is down: time for all of it.
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			peakDown = max(peakDown, p.rssKB())
		}
		if err := e.nats.start(); err != nil {
			t.Fatal(err)
		}
		up := time.Now()
		peak = peakDown
		for time.Since(up) < 2*time.Minute && e.pending() > 0 {
			peak = max(peak, p.rssKB())
			time.Sleep(20 * time.Millisecond)
		}
		drain = time.Since(up)
		if code := r.stopGracefully(); code != 0 {
			t.Errorf("relay %s: exit %d after SIGTERM", r.name, code)
		}
		return e, peakDown, peak, drain
	}
	lifted := "the same run with the budget lifted (--max-batch-bytes 1 GiB): in the long version only"
	if *flagLong {
		_, down, all, _ := run("--max-batch-bytes", strconv.Itoa(1<<30))
		lifted = fmt.Sprintf("peak RSS with the budget lifted (--max-batch-bytes 1 GiB): %d MiB while the broker was down, %d MiB over the drain", down>>10, all>>10)
	}
	e, peakDown, peak, drain := run()
	res := e.finish(Row{Key: "15i", Scenario: "WAL source: large payloads behind a broker that is down",
		Fault: fmt.Sprintf("NATS stopped while %d events of 30 MB are committed (one per transaction) and streamed; restarted 10 s later; relay with GOMEMLIMIT=160MiB", big),
		Runs:  1, Resent: e.wire.resent(), Drain: drain,
		Details: []string{
			fmt.Sprintf("peak RSS with the default byte budget (16 MiB): %d MiB while the broker was down, %d MiB over the drain", peakDown>>10, peak>>10),
			lifted,
		}})
	if peak > rssLimit {
		t.Errorf("relay peak RSS %d MiB with the byte budget, want under %d MiB", peak>>10, rssLimit>>10)
	}
	if res.Delivered != big || len(res.Lost) > 0 {
		t.Errorf("delivered %d of %d, lost %d", res.Delivered, big, len(res.Lost))
	}
}
