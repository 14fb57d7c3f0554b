package wal

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// The confirmed position never passes an unsettled transaction, whatever
// the order of the acknowledgements.
func TestProgressLowestUnsettled(t *testing.T) {
	p := newProgress(100)
	for _, lsn := range []pglogrepl.LSN{200, 300, 400} {
		p.add(lsn)
	}
	steps := []struct {
		ack  pglogrepl.LSN
		want pglogrepl.LSN
	}{
		{300, 100}, // 200 still unsettled
		{400, 100},
		{200, 400}, // the gap closes: past all three
	}
	for _, s := range steps {
		if err := p.ack(s.ack); err != nil {
			t.Fatal(err)
		}
		if got := p.position(); got != s.want {
			t.Fatalf("after ack %d: confirmed %d, want %d", s.ack, got, s.want)
		}
	}
	if err := p.ack(300); err != nil {
		t.Fatalf("a repeated ack: %v", err)
	}
	if err := p.ack(999); err == nil {
		t.Fatal("an ack of a position never handed out was accepted")
	}
}

// Positions without events (keepalives, transactions of other tables) move
// the confirmed position only when nothing is unsettled.
func TestProgressReachedWaitsForUnsettled(t *testing.T) {
	p := newProgress(100)
	p.reached(150)
	if got := p.position(); got != 150 {
		t.Fatalf("idle: confirmed %d, want 150", got)
	}
	p.add(200)
	p.reached(250)
	if got := p.position(); got != 150 {
		t.Fatalf("with 200 unsettled: confirmed %d, want 150", got)
	}
	if err := p.ack(200); err != nil {
		t.Fatal(err)
	}
	if got := p.position(); got != 250 {
		t.Fatalf("after the ack: confirmed %d, want 250", got)
	}
	p.reached(240) // an older position never moves it back
	if got := p.position(); got != 250 {
		t.Fatalf("confirmed moved back to %d", got)
	}
}
