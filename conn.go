package outbox

import (
	"cmp"
	"context"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTCPUserTimeout is the TCP user timeout SetTCPTimeouts applies when
// given 0: long enough for a failover or a congested link, short enough that
// a statement on a dead connection fails in seconds rather than after the
// kernel's ~15 minutes of retransmissions (tcp_retries2).
const DefaultTCPUserTimeout = 30 * time.Second

// DefaultTCPKeepAlive is the idle time before the first keepalive probe and
// the interval between probes that SetTCPTimeouts sets: an idle connection
// (a LISTEN, a pool's spare) to a vanished server is noticed within about
// DefaultTCPUserTimeout too.
const DefaultTCPKeepAlive = 10 * time.Second

// SetTCPTimeouts makes the connections cfg opens give up on a server that
// stops acknowledging: with TCP_USER_TIMEOUT (Linux) a connection whose sent
// bytes stay unacknowledged for userTimeout is closed by the kernel, and
// keepalive probes (every DefaultTCPKeepAlive) do the same for an idle
// connection. Without it a statement on a connection to a server that
// vanished (a host powered off, a network partition, a NAT entry dropped)
// waits for the kernel to give up, about 15 minutes, and the relay's worker
// or your admin.Admin call waits with it. userTimeout 0 means
// DefaultTCPUserTimeout; a negative userTimeout leaves the user timeout alone
// and only sets keepalive.
//
// Apply it to the pgxpool.Config (or pgx.ConnConfig) you give the relay and
// admin.New: SetTCPTimeouts(&poolCfg.ConnConfig.Config, 0). It wraps cfg's
// DialFunc, so call it after setting your own; connect_timeout still bounds
// connecting. On systems other than Linux only keepalive is set. A statement
// deadline (a context) is still needed against a peer that acknowledges but
// never answers (a stopped server process behind a live proxy).
func SetTCPTimeouts(cfg *pgconn.Config, userTimeout time.Duration) {
	userTimeout = cmp.Or(userTimeout, DefaultTCPUserTimeout)
	dial := cfg.DialFunc
	if dial == nil { // not cmp.Or: a func is not comparable
		dial = (&net.Dialer{Timeout: cfg.ConnectTimeout}).DialContext
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc, ok := conn.(*net.TCPConn)
		if !ok {
			return conn, nil // a Unix socket: no network to lose
		}
		if err := tc.SetKeepAliveConfig(net.KeepAliveConfig{
			Enable: true, Idle: DefaultTCPKeepAlive, Interval: DefaultTCPKeepAlive, Count: 3,
		}); err != nil {
			_ = conn.Close()
			return nil, err
		}
		if userTimeout > 0 {
			if err := setUserTimeout(tc, userTimeout); err != nil {
				_ = conn.Close()
				return nil, err
			}
		}
		return conn, nil
	}
}
