package console

import "time"

// SetClock makes c's sign-in throttle read the time from now.
func SetClock(c *Console, now func() time.Time) {
	c.throttle.mu.Lock()
	defer c.throttle.mu.Unlock()
	c.throttle.now = now
}
