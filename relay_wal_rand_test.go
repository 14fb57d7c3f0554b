package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// TestWALSourceOrderedRandomFailures: ordered mode on the WAL source with a
// publisher failing 10% of publishes at random: every aggregate's events
// are first published in the order they committed.
func TestWALSourceOrderedRandomFailures(t *testing.T) {
	e, _ := setupWAL(t)
	var mu sync.Mutex
	first := map[uuid.UUID]bool{}
	order := map[string][]uuid.UUID{}
	rng := rand.New(rand.NewPCG(1, 2))
	pub := outbox.PublisherFunc(func(ctx context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(10) == 0 {
			return errors.New("injected failure")
		}
		if !first[m.ID] {
			first[m.ID] = true
			order[m.AggregateID] = append(order[m.AggregateID], m.ID)
		}
		return nil
	})
	r := e.relay(pub, walConfig(outbox.RelayConfig{Ordered: true, BatchSize: 20,
		RetryBackoff: outbox.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}}))
	e.run(r)
	waitStreaming(t, r, 10*time.Second)
	const aggs, per = 5, 60
	written := make([][]uuid.UUID, aggs)
	var wg sync.WaitGroup
	for a := range aggs {
		wg.Go(func() {
			for i := range per {
				written[a] = append(written[a], e.writeEvents(event(fmt.Sprintf("a%d", a), i))...)
			}
		})
	}
	wg.Wait()
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(first)
	}
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d of %d delivered", delivered(), aggs*per) }), 60*time.Second,
		"every event delivered", func() bool { return delivered() == aggs*per })
	mu.Lock()
	defer mu.Unlock()
	for a := range aggs {
		got := order[fmt.Sprintf("a%d", a)]
		for i := range got {
			if got[i] != written[a][i] {
				idx := -1
				for j, id := range written[a] {
					if id == got[i] {
						idx = j
					}
				}
				t.Errorf("aggregate a%d: publish %d is event %d", a, i, idx)
				break
			}
		}
	}
}
