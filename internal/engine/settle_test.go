package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/outboxtype"
)

// TestSettle: the per-row rules, and the batch-wide one (a batch where
// nothing was confirmed and the failures are timeouts means the destination
// is down, not that every message failed).
func TestSettle(t *testing.T) {
	e := &Engine{cfg: Config{MaxAttempts: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryBackoff: outboxtype.Backoff{Base: time.Second, Max: time.Minute}}}
	row := func(attempt int, bad error) *Row {
		r := &Row{Bad: bad}
		r.Attempt = attempt
		return r
	}
	timeout := Attempt{Err: context.DeadlineExceeded, Timeout: true}
	nack := Attempt{Err: errors.New("nack")}

	// Nothing confirmed, timeouts: unavailable, no attempt counted.
	s := e.settle([]*Row{row(1, nil), row(1, nil)}, []Attempt{timeout, timeout})
	if s.unavailable != 2 || s.retried != 0 || s.outcomes[0].verdict != unavailable {
		t.Errorf("all timed out: %+v, want 2 unavailable", s)
	}

	// Confirmed before the timeouts only: the broker slowed mid-batch.
	s = e.settle([]*Row{row(1, nil), row(1, nil), row(1, nil)}, []Attempt{{}, timeout, timeout})
	if s.unavailable != 2 || s.retried != 0 || s.published != 1 {
		t.Errorf("timed out after a confirmation: %+v, want 1 published and 2 unavailable", s)
	}

	// A row after it confirmed: the same timeout is the row's own failure.
	rows := []*Row{row(1, nil), row(1, nil), row(3, nil), row(1, errors.New("bad headers")), row(1, nil), row(1, nil)}
	attempts := []Attempt{timeout, {}, nack, {Err: errors.New("bad headers")},
		{Err: errHeldBack}, {Err: errors.New("429"), RetryAfter: 1000 * time.Hour}}
	s = e.settle(rows, attempts)
	want := []verdict{retry, published, dead, dead, untouched, retry}
	for i, o := range s.outcomes {
		if o.verdict != want[i] {
			t.Errorf("row %d: verdict %d, want %d", i, o.verdict, want[i])
		}
	}
	if s.published != 1 || s.retried != 2 || s.dead != 2 || s.unavailable != 0 {
		t.Errorf("counts %+v", s)
	}
	if c := s.outcomes[3].class; c != outboxtype.ClassPermanent {
		t.Errorf("bad row: class %s, want permanent", c)
	}
	if d := s.outcomes[0].delay; d < 500*time.Millisecond || d > time.Second {
		t.Errorf("first retry in %s, want within the first backoff step", d)
	}
	if d := s.outcomes[5].delay; d != maxRequestedDelay {
		t.Errorf("Retry-After of 1000h gave %s, want it capped at %s", d, maxRequestedDelay)
	}
	e.report(rows, s) // logs and counts without metrics
	if e.BrokerDown() {
		t.Error("broker reported down after a batch with a confirmation")
	}
}

// TestSettleAlone: an unavailable failure counts an attempt only from the
// row's second failure beside a later confirmation in its batch; failures
// in an outage (nothing confirmed) are not remembered.
func TestSettleAlone(t *testing.T) {
	e := &Engine{cfg: Config{MaxAttempts: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryBackoff: outboxtype.Backoff{Base: time.Second, Max: time.Minute}}}
	reset := Attempt{Err: errors.New("connection reset"), Class: outboxtype.ClassUnavailable}
	poison := &Row{}
	poison.ID = [16]byte{1}
	poison.Attempt = 1
	other := func() *Row { return &Row{} }
	verdicts := func(rows []*Row, attempts []Attempt) []verdict {
		s := e.settle(rows, attempts)
		v := make([]verdict, len(rows))
		for i, o := range s.outcomes {
			v[i] = o.verdict
		}
		return v
	}
	// An outage: nothing confirmed, twice. Not remembered.
	for range 2 {
		if v := verdicts([]*Row{poison, other()}, []Attempt{reset, reset}); v[0] != unavailable {
			t.Fatalf("outage: verdict %d, want unavailable", v[0])
		}
	}
	// The first batch after it: the row fails, the next goes through.
	if v := verdicts([]*Row{poison, other()}, []Attempt{reset, {}}); v[0] != unavailable {
		t.Fatalf("first failure beside a confirmation: verdict %d, want unavailable", v[0])
	}
	// Confirmed only before it: not remembered either.
	if v := verdicts([]*Row{other(), poison}, []Attempt{{}, reset}); v[1] != unavailable {
		t.Fatalf("failure after the confirmation: verdict %d, want unavailable", v[1])
	}
	// Again beside a later confirmation: failing alone.
	if v := verdicts([]*Row{poison, other()}, []Attempt{reset, {}}); v[0] != retry {
		t.Fatalf("second failure beside a confirmation: verdict %d, want retry", v[0])
	}
}
