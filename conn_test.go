package outbox_test

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestSetTCPTimeouts checks that the connections a pool opens carry the
// TCP user timeout and keepalive, and still honour connect_timeout.
func TestSetTCPTimeouts(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("TCP_USER_TIMEOUT is Linux-only")
	}
	for _, tc := range []struct {
		name string
		set  time.Duration
		want int
	}{{"default", 0, int(outbox.DefaultTCPUserTimeout.Milliseconds())}, {"7s", 7 * time.Second, 7000}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(testdb.URL())
			if err != nil {
				t.Fatal(err)
			}
			outbox.SetTCPTimeouts(&cfg.ConnConfig.Config, tc.set)
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			c, err := pool.Acquire(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			tcp, ok := c.Conn().PgConn().Conn().(*net.TCPConn)
			if !ok {
				t.Fatalf("connection is %T, want *net.TCPConn (TEST_DATABASE_URL must use TCP)", c.Conn().PgConn().Conn())
			}
			raw, err := tcp.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var ut, ka int
			var gerr error
			_ = raw.Control(func(fd uintptr) {
				ut, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
				if gerr == nil {
					ka, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
				}
			})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if ut != tc.want || ka != 1 {
				t.Fatalf("TCP_USER_TIMEOUT = %d ms, SO_KEEPALIVE = %d; want %d ms and 1", ut, ka, tc.want)
			}
		})
	}
}

// TestSetTCPTimeoutsKeepsConnectTimeout: wrapping the dialer keeps
// connect_timeout: a server that accepts and never answers fails the
// connection in time.
func TestSetTCPTimeoutsKeepsConnectTimeout(t *testing.T) {
	t.Parallel()
	px := tcpproxy.Start(t, testdb.HostPort(t))
	px.Partition()
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	testdb.ViaProxy(t, cfg, px.Addr())
	cfg.ConnConfig.ConnectTimeout = time.Second
	outbox.SetTCPTimeouts(&cfg.ConnConfig.Config, 0)
	start := time.Now()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = pool.Ping(context.Background())
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("ping through a partition: err=%v after %s, want an error within 5s", err, time.Since(start))
	}
}
