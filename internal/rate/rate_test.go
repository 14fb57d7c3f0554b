package rate

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := Window{Span: 100 * time.Millisecond}
	for i := range 350 { // 1000/s for 350ms, one event per ms
		w.Add(t0.Add(time.Duration(i)*time.Millisecond), 1)
	}
	if r := w.Rate(t0.Add(350 * time.Millisecond)); r < 950 || r > 1050 {
		t.Fatalf("rate %.0f, want about 1000", r)
	}
	// Bursts inside a span do not move the rate until the span ends.
	w.Add(t0.Add(350*time.Millisecond), 50)
	if r := w.Rate(t0.Add(351 * time.Millisecond)); r < 950 || r > 1050 {
		t.Fatalf("rate %.0f after a burst inside the span, want still about 1000", r)
	}
	if r := w.Rate(t0.Add(time.Second)); r != 0 {
		t.Fatalf("rate %.0f after 700ms of silence, want 0", r)
	}
}

func TestGate(t *testing.T) {
	g := Gate{Above: 1000}
	for _, c := range []struct {
		r    float64
		want bool
	}{
		{500, false}, {1000, false}, {1001, true}, {900, true}, {750, true}, {749, false},
		{900, false}, {2000, true}, {0, false},
	} {
		if got := g.Heavy(c.r); got != c.want {
			t.Errorf("Heavy(%v) = %v, want %v", c.r, got, c.want)
		}
	}
	off := Gate{}
	if off.Heavy(1e6) {
		t.Error("a gate with Above 0 is never heavy")
	}
}

func TestRamp(t *testing.T) {
	for _, c := range []struct{ r, want float64 }{{1000, 0}, {1500, 0}, {2250, 0.5}, {3000, 1}, {9000, 1}} {
		if got := Ramp(c.r, 1500); got != c.want {
			t.Errorf("Ramp(%v, 1500) = %v, want %v", c.r, got, c.want)
		}
	}
}
