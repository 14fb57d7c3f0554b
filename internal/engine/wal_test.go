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
