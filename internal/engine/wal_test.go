package engine

import (
	"strconv"
	"testing"
)

func TestVisibleIn(t *testing.T) {
	const epoch = uint64(3) << 32
	for _, c := range []struct {
		snap string
		xids []uint32
		want bool
	}{
		{"100:105:", []uint32{99, 104}, true},
		{"100:105:101,103", []uint32{99, 102, 104}, true},
		{"100:105:101,103", []uint32{103}, false},
		{"100:105:", []uint32{105}, false}, // not completed yet
		{"100:105:", []uint32{200}, false},
		// Epoch 3: 32-bit ids near the wrap belong to the previous epoch.
		{u(epoch+10) + ":" + u(epoch+20) + ":" + u(epoch+15), []uint32{12, 0xfffffff0}, true},
		{u(epoch+10) + ":" + u(epoch+20) + ":" + u(epoch+15), []uint32{15}, false},
		{u(epoch-5) + ":" + u(epoch+20) + ":" + u(epoch-2), []uint32{0xfffffffe}, false},
	} {
		xs := map[uint32]bool{}
		for _, x := range c.xids {
			xs[x] = true
		}
		got, err := visibleIn(c.snap, xs)
		if err != nil || got != c.want {
			t.Errorf("visibleIn(%q, %v) = %v, %v; want %v", c.snap, c.xids, got, err, c.want)
		}
	}
	if _, err := visibleIn("garbage", map[uint32]bool{1: true}); err == nil {
		t.Error("a malformed snapshot gave no error")
	}
}

func u(x uint64) string { return strconv.FormatUint(x, 10) }

func TestHorizonBelow(t *testing.T) {
	var h horizon
	if h.below(5) {
		t.Error("an empty horizon says an id is visible")
	}
	h.set("100:105:101")
	for x, want := range map[uint32]bool{99: true, 100: false, 104: false, 200: false} {
		if got := h.below(x); got != want {
			t.Errorf("below(%d) = %v, want %v", x, got, want)
		}
	}
	const epoch = uint64(2) << 32
	h.set(u(epoch+10) + ":" + u(epoch+20) + ":")
	for x, want := range map[uint32]bool{5: true, 0xfffffff0: true, 10: false, 15: false} {
		if got := h.below(x); got != want {
			t.Errorf("epoch 2: below(%#x) = %v, want %v", x, got, want)
		}
	}
}
