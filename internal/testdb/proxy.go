package testdb

import (
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// HostPort is the shared test database's host:port, for a tcpproxy to
// stand in front of.
func HostPort(t testing.TB) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// ViaProxy points cfg at addr (a tcpproxy in front of the test database),
// with no fallback that would bypass it.
func ViaProxy(t testing.TB, cfg *pgxpool.Config, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host = host
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Port = uint16(p)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.TLSConfig = nil
}
