//go:build !linux

package outbox

import (
	"net"
	"time"
)

// setUserTimeout is a no-op where TCP_USER_TIMEOUT does not exist; keepalive
// still applies.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
