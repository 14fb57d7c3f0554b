package engine

import (
	"testing"
	"time"
)

func TestCursor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCursor(time.Second, false) // lag 250ms
	if f, full := c.nextFloor(t0); f != 0 || !full {
		t.Fatalf("first claim = floor %d full %v; want a full scan", f, full)
	}
	c.claimed(t0, 100)
	if f, full := c.nextFloor(t0.Add(100 * time.Millisecond)); f != 0 || full {
		t.Fatalf("before lag: floor %d full %v; want 0, not full", f, full)
	}
	c.claimed(t0.Add(100*time.Millisecond), 200)
	c.claimed(t0.Add(101*time.Millisecond), 150) // lower maxima are ignored
	if f, _ := c.nextFloor(t0.Add(300 * time.Millisecond)); f != 100 {
		t.Fatalf("after lag of the first maximum: floor %d, want 100", f)
	}
	if f, _ := c.nextFloor(t0.Add(400 * time.Millisecond)); f != 200 {
		t.Fatalf("after lag of the second: floor %d, want 200", f)
	}
	if f, full := c.nextFloor(t0.Add(time.Second)); f != 0 || !full {
		t.Fatalf("after the rescan interval: floor %d full %v; want a full scan", f, full)
	}
	if f, full := c.nextFloor(t0.Add(time.Second + time.Millisecond)); f != 200 || full {
		t.Fatalf("after the rescan: floor %d full %v; want 200 again", f, full)
	}
	c.reset()
	if _, full := c.nextFloor(t0.Add(time.Second + 2*time.Millisecond)); !full {
		t.Fatal("reset must make the next claim a full scan")
	}
}

func TestCursorCoalesces(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCursor(time.Second, false)
	for i := range 10000 {
		c.claimed(t0.Add(time.Duration(i)*100*time.Microsecond), int64(i+1))
	}
	if n := len(c.maxima); n > 40 {
		t.Fatalf("%d maxima kept for 10000 claims within 1s; want a handful per lag", n)
	}
	c.nextFloor(t0.Add(2 * time.Second)) // the first claim is a full scan
	if f, _ := c.nextFloor(t0.Add(2 * time.Second)); f != 10000 {
		t.Fatalf("floor %d, want 10000", f)
	}
}

func TestCursorLowWater(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCursor(time.Second, true)
	c.nextFloor(t0)
	c.claimed(t0, 1000)
	c.setLowWater(500)
	if f, _ := c.nextFloor(t0.Add(300 * time.Millisecond)); f != 499 {
		t.Fatalf("floor %d, want 499 (just below the low water)", f)
	}
	c.setLowWater(300) // a retry came due below: the floor goes back
	if f, _ := c.nextFloor(t0.Add(300 * time.Millisecond)); f != 299 {
		t.Fatalf("floor %d, want 299", f)
	}
	c.setLowWater(0) // nothing pending: only the lag bounds the floor
	if f, _ := c.nextFloor(t0.Add(300 * time.Millisecond)); f != 1000 {
		t.Fatalf("floor %d, want 1000", f)
	}
	c = newCursor(time.Second, true)
	c.nextFloor(t0)
	c.setLowWater(500)
	if f, _ := c.nextFloor(t0.Add(time.Millisecond)); f != 0 {
		t.Fatalf("floor %d, want 0: nothing claimed lag ago yet", f)
	}
}

// nextFloor is next as floor and whether the claim is the rescan.
func (c *cursor) nextFloor(now time.Time) (int64, bool) {
	p := c.next(now)
	return p.floor, p.rescan
}

// TestCursorSweep: a rescan that comes back full is continued from its last
// row, below the floor, until a claim comes back short or reaches the floor.
func TestCursorSweep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCursor(time.Second, false)
	c.next(t0)
	c.claimed(t0, 10000)
	p := c.next(t0.Add(2 * time.Second)) // the rescan
	if !p.rescan || !p.sweep || p.floor != 0 {
		t.Fatalf("rescan: %+v", p)
	}
	c.swept(p, true, 100)
	p = c.next(t0.Add(2*time.Second + time.Millisecond))
	if p.rescan || !p.sweep || p.floor != 100 {
		t.Fatalf("after a full rescan: %+v; want a sweep from 100", p)
	}
	c.swept(p, true, 200)
	if p = c.next(t0.Add(2*time.Second + 2*time.Millisecond)); p.floor != 200 || !p.sweep {
		t.Fatalf("after a full sweep claim: %+v; want a sweep from 200", p)
	}
	c.swept(p, false, 250)
	if p = c.next(t0.Add(2*time.Second + 3*time.Millisecond)); p.sweep || p.floor != 10000 {
		t.Fatalf("after a short sweep claim: %+v; want the floor 10000", p)
	}
	// A full sweep claim that reaches the floor ends the sweep as well.
	p = c.next(t0.Add(4 * time.Second))
	c.swept(p, true, 10001)
	if p = c.next(t0.Add(4*time.Second + time.Millisecond)); p.sweep {
		t.Fatalf("a sweep past the floor goes on: %+v", p)
	}
}
