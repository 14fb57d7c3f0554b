package outboxtype

import (
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff: the n-th wait is Base·2^(n-1), capped at
// Max, with jitter between half and all of it.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// Delay returns the wait before retry number n (n >= 1): Base·2^(n-1) capped
// at Max, with "equal jitter" (half fixed, half random) so a burst of
// failures spreads out without ever retrying immediately.
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
