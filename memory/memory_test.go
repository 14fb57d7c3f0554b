package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
	"github.com/pgoutbox/outbox/publishertest"
)

func TestRecordsFailsAndWaits(t *testing.T) {
	pub := memory.New()
	a, b := publishertest.NewMessage("1", `{}`), publishertest.NewMessage("2", `{}`)
	boom := errors.New("boom")
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == b.ID {
			return boom
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- pub.WaitDistinct(ctx, 1) }()
	if err := pub.Publish(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, b); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the configured failure", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitDistinct: %v", err)
	}
	pub.FailWith(nil)
	_ = pub.Publish(ctx, a)
	if pub.Len() != 2 || pub.Distinct() != 1 || pub.Count()[a.ID] != 2 || pub.Count()[b.ID] != 0 {
		t.Errorf("len %d distinct %d counts %v", pub.Len(), pub.Distinct(), pub.Count())
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := pub.WaitDistinct(short, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitDistinct past its deadline = %v", err)
	}
}
