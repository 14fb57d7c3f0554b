package outbox_test

import (
	"testing"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

func TestRelayPublishesEveryEvent(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(250)
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 50, Workers: 3})
	stop := e.run(r)
	if err := pub.WaitDistinct(ctx(t), len(ids)); err != nil {
		t.Fatalf("published %d of %d: %v", pub.Len(), len(ids), err)
	}
	stop()
	counts := pub.Count()
	for _, id := range ids {
		if counts[id] != 1 {
			t.Errorf("event %s published %d times, want 1", id, counts[id])
		}
	}
	if n := e.count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d rows still unprocessed", n)
	}
}
