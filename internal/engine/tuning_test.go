package engine

import (
	"testing"
	"time"
)

// TestClaimSpacing: no spacing up to BatchDelayAbove events/s, BatchDelay
// from twice that rate, none once the stream stops or when disabled.
func TestClaimSpacing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	feed := func(m *rateMeter, perClaim int, every time.Duration, d time.Duration) time.Time {
		now := t0
		for ; now.Sub(t0) < d; now = now.Add(every) {
			m.observe(now, perClaim)
		}
		return now
	}
	m := newRateMeter(10*time.Millisecond, 1500)
	if d := m.delay(feed(m, 2, 2*time.Millisecond, 500*time.Millisecond)); d != 0 {
		t.Errorf("1000 events/s: spacing %s, want 0", d)
	}
	m = newRateMeter(10*time.Millisecond, 1500)
	end := feed(m, 50, 10*time.Millisecond, 500*time.Millisecond) // 5000/s
	if d := m.delay(end); d != 10*time.Millisecond {
		t.Errorf("5000 events/s: spacing %s, want 10ms", d)
	}
	// Just above the threshold the pace is whole: no ramp whose claims
	// grow as the stream slows.
	m = newRateMeter(10*time.Millisecond, 1500)
	if d := m.delay(feed(m, 16, 10*time.Millisecond, 500*time.Millisecond)); d != 10*time.Millisecond {
		t.Errorf("1600 events/s: spacing %s, want 10ms", d)
	}
	// Once heavy, a stream that slows to 1200 events/s stays paced; at
	// 1000 it is light again.
	t0 = t0.Add(time.Second)
	if d := m.delay(feed(m, 12, 10*time.Millisecond, 500*time.Millisecond)); d != 10*time.Millisecond {
		t.Errorf("slowed to 1200 events/s after 1600: spacing %s, want 10ms", d)
	}
	t0 = t0.Add(time.Second)
	if d := m.delay(feed(m, 10, 10*time.Millisecond, 500*time.Millisecond)); d != 0 {
		t.Errorf("slowed to 1000 events/s: spacing %s, want 0", d)
	}
	if d := m.delay(end.Add(time.Second)); d != 0 {
		t.Errorf("after a second without claims: spacing %s, want 0", d)
	}
	off := newRateMeter(0, 1500)
	if d := off.delay(feed(off, 50, 10*time.Millisecond, 500*time.Millisecond)); d != 0 {
		t.Errorf("BatchDelay off: spacing %s", d)
	}
}
