package testdb

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/pgoutbox/outbox/internal/testcerts"
)

// TLSServer is a private PostgreSQL that accepts TLS connections only
// (ssl=on, hostssl lines alone in pg_hba.conf), with wal_level=logical. Its
// certificate, for 127.0.0.1 and localhost, is signed by a CA generated when
// the test binary first asks for it.
type TLSServer struct {
	*Server        // URL: sslmode=verify-full with sslrootcert=CA
	CA      string // the CA's certificate (PEM)
	Port    int
}

// TLS returns the test binary's TLS server, starting it on first use; Main
// stops it. Without the server binaries the test is skipped, or fails under
// CI=true.
func TLS(t testing.TB) *TLSServer {
	t.Helper()
	tlsSrv.mu.Lock()
	defer tlsSrv.mu.Unlock()
	if tlsSrv.srv == nil && tlsSrv.err == nil {
		tlsSrv.srv, tlsSrv.err = startTLS(t)
	}
	if errors.Is(tlsSrv.err, errNoBinaries) && os.Getenv("CI") != "true" {
		t.Skipf("testdb: %v", tlsSrv.err)
	}
	if tlsSrv.err != nil {
		t.Fatalf("testdb: TLS server: %v", tlsSrv.err)
	}
	return tlsSrv.srv
}

var tlsSrv struct {
	mu      sync.Mutex
	srv     *TLSServer
	err     error
	cluster *cluster
}

// StopTLS stops the TLS server, if a test started one; Main calls it.
func StopTLS() {
	tlsSrv.mu.Lock()
	defer tlsSrv.mu.Unlock()
	if tlsSrv.cluster != nil {
		tlsSrv.cluster.stop()
		tlsSrv.cluster = nil
		tlsSrv.srv, tlsSrv.err = nil, errors.New("the TLS server was stopped (testdb.Main returned)")
	}
}

func startTLS(t testing.TB) (*TLSServer, error) {
	certs, err := os.MkdirTemp("", "pgoutbox-testdb-certs-")
	if err != nil {
		return nil, err
	}
	testcerts.Write(t, certs)
	ca := filepath.Join(certs, "ca.pem")
	c, err := startCluster(clusterOptions{
		// 127.0.0.2 too, an address the certificate does not name, for
		// tests of a wrong host name.
		listen:   "127.0.0.1,127.0.0.2",
		settings: []string{"ssl=on", "ssl_cert_file=server.pem", "ssl_key_file=server-key.pem"},
		prepare: func(data string, chown func(string) error) error {
			for _, f := range []string{"server.pem", "server-key.pem"} {
				b, err := os.ReadFile(filepath.Join(certs, f))
				if err != nil {
					return err
				}
				p := filepath.Join(data, f)
				if err := os.WriteFile(p, b, 0o600); err != nil {
					return err
				}
				if err := chown(p); err != nil {
					return err
				}
			}
			// TLS only: a connection without it finds no pg_hba.conf line.
			hba := "local all all trust\n" +
				"hostssl all all 127.0.0.0/8 trust\n" +
				"hostssl replication all 127.0.0.0/8 trust\n"
			return os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600)
		},
		urlParams: "sslmode=verify-full&sslrootcert=" + url.QueryEscape(ca),
		what:      "ssl=on, wal_level=logical",
	})
	if err != nil {
		os.RemoveAll(certs)
		return nil, err
	}
	tlsSrv.cluster = c
	return &TLSServer{Server: &Server{url: c.url()}, CA: ca, Port: c.port}, nil
}

// URLWith returns the server's URL for database "postgres" with host and
// query parameters replaced: "" keeps the host; a parameter set to ""
// is removed.
func (s *TLSServer) URLWith(host string, params map[string]string) string {
	u, err := url.Parse(s.url)
	if err != nil {
		panic(fmt.Sprintf("testdb: the TLS server's URL: %v", err))
	}
	if host != "" {
		u.Host = host + ":" + strconv.Itoa(s.Port)
	}
	q := u.Query()
	for k, v := range params {
		if v == "" {
			q.Del(k)
		} else {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// OtherCA writes the certificate of a CA that signed nothing the server
// has into a test's temporary folder and returns its path.
func OtherCA(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	testcerts.Write(t, dir)
	return filepath.Join(dir, "ca.pem")
}
