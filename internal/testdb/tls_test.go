package testdb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The TLS server takes verify-full connections with its CA, and refuses
// plain ones, another CA and a host its certificate does not name.
func TestTLSServer(t *testing.T) {
	t.Parallel()
	s := TLS(t)
	connect := func(dsn string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var ssl bool
		if err := conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
			t.Errorf("pg_stat_ssl.ssl = %v, %v; want true", ssl, err)
		}
		return nil
	}
	if err := connect(s.URL()); err != nil {
		t.Fatalf("verify-full with the CA: %v", err)
	}
	for name, c := range map[string]struct{ dsn, want string }{
		"plain":      {s.URLWith("", map[string]string{"sslmode": "disable", "sslrootcert": ""}), "no encryption"},
		"other CA":   {s.URLWith("", map[string]string{"sslrootcert": OtherCA(t)}), "unknown authority"},
		"wrong host": {s.URLWith("127.0.0.2", nil), "127.0.0.2"},
	} {
		err := connect(c.dsn)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v; want one containing %q", name, err, c.want)
		}
		t.Logf("%s: %v", name, err)
	}
}
