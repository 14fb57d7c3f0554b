package outbox

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT on c.
func setUserTimeout(c *net.TCPConn, d time.Duration) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("outbox: TCP user timeout: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil {
		return fmt.Errorf("outbox: TCP user timeout: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("outbox: TCP user timeout: %w", serr)
	}
	return nil
}
