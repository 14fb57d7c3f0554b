package dberr_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/dberr"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// connect returns pgx's error connecting with dsn, and the config.
func connect(t *testing.T, dsn string) (*pgx.ConnConfig, error) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		conn.Close(ctx)
	}
	return cfg, err
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := testdb.TLS(t)
	otherCA := testdb.OtherCA(t)
	for _, c := range []struct {
		name, dsn string
		want      []string
	}{
		{"other CA", s.URLWith("", map[string]string{"sslrootcert": otherCA}),
			[]string{"is not signed by the CA in sslrootcert=" + otherCA, `issued by "CN=pgoutbox test CA"`, "127.0.0.1:", "set sslrootcert"}},
		{"system CAs", s.URLWith("", map[string]string{"sslrootcert": ""}),
			[]string{"is not signed by any of the system's CAs (no sslrootcert is set)"}},
		{"wrong host", s.URLWith("127.0.0.2", nil),
			[]string{"at 127.0.0.2:", "valid for 127.0.0.1, localhost, not 127.0.0.2", "connect with a host name the certificate names"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := connect(t, c.dsn)
			if err == nil {
				t.Fatal("connected; want a TLS error")
			}
			d := dberr.TLS(cfg, err)
			if d == nil {
				t.Fatalf("TLS(%v) = nil; want a description", err)
			}
			if !errors.Is(d, dberr.ErrTLS) {
				t.Errorf("%v does not match ErrTLS", d)
			}
			for _, w := range c.want {
				if !strings.Contains(d.Error(), w) {
					t.Errorf("%q\ndoes not say %q", d, w)
				}
			}
			t.Log(d)
			if strings.Contains(d.Error(), "\n") {
				t.Errorf("%q is more than one line", d)
			}
		})
	}
	t.Run("not TLS", func(t *testing.T) {
		t.Parallel()
		cfg, err := connect(t, s.URLWith("", map[string]string{"dbname": "no_such_database"}))
		if err == nil {
			t.Fatal("connected to a missing database")
		}
		if d := dberr.TLS(cfg, err); d != nil {
			t.Errorf("TLS(%v) = %v; want nil for an error that is not TLS's", err, d)
		}
	})
}

// A server that answers TLS's SSLRequest with N (ssl=off) is named as such.
func TestTLSRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 8)
			if _, err := io.ReadFull(c, b); err == nil {
				c.Write([]byte("N"))
			}
			c.Close()
		}
	}()
	cfg, err := connect(t, "postgres://postgres@"+ln.Addr().String()+"/postgres?sslmode=require&connect_timeout=5")
	d := dberr.TLS(cfg, err)
	if d == nil || !strings.Contains(d.Error(), "the server does not offer TLS (ssl=off)") {
		t.Fatalf("TLS(%v) = %v; want it to say the server does not offer TLS", err, d)
	}
}

func TestSSLRootCert(t *testing.T) {
	t.Setenv("PGSSLROOTCERT", "/env/ca.pem")
	for in, want := range map[string]string{
		"postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem": "/etc/ca.pem",
		"host=h sslmode=verify-full sslrootcert=/etc/ca.pem":                "/etc/ca.pem",
		`host=h sslrootcert='/etc/my ca\'s.pem' sslmode=verify-full`:        `/etc/my ca's.pem`,
		"host=h sslmode=verify-full":                                        "/env/ca.pem",
		"postgres://u@h/db":                                                 "/env/ca.pem",
	} {
		if got := dberr.SSLRootCert(in); got != want {
			t.Errorf("SSLRootCert(%q) = %q; want %q", in, got, want)
		}
	}
}

// A server that hangs up during the handshake is an outage, not TLS's
// configuration: TLS leaves it alone, so the relay waits it out.
func TestTLSHangUp(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 8)
			if _, err := io.ReadFull(c, b); err == nil {
				c.Write([]byte("S")) // TLS accepted, then nothing
			}
			c.Close()
		}
	}()
	cfg, err := connect(t, "postgres://postgres@"+ln.Addr().String()+"/postgres?sslmode=require&connect_timeout=5")
	if err == nil {
		t.Fatal("connected to a server that hangs up")
	}
	t.Log(err)
	if d := dberr.TLS(cfg, err); d != nil {
		t.Errorf("TLS(%v) = %v; want nil for a hang-up", err, d)
	}
}
