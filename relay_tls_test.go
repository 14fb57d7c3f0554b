package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
)

// Both sources relay over sslmode=verify-full to a server that takes TLS
// connections only.
func TestRelayTLS(t *testing.T) {
	for _, source := range []outbox.Source{outbox.SourceTable, outbox.SourceWAL} {
		t.Run(string(source), func(t *testing.T) {
			e := setupOn(t, testdb.TLS(t).Server)
			cfg := outbox.RelayConfig{PollInterval: 20 * time.Millisecond}
			if source == outbox.SourceWAL {
				walNames(t, e) // checks at cleanup that the slot is gone
				if _, err := outbox.SetupReplication(ctx(t), e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil {
					t.Fatalf("SetupReplication over TLS: %v", err)
				}
				t.Cleanup(func() {
					c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					if err := outbox.DropReplication(c, e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil {
						t.Errorf("DropReplication: %v", err)
					}
				})
				cfg = walConfig(cfg)
			}
			pub := memory.New()
			r := e.relay(pub, cfg)
			stop := e.run(r)
			if source == outbox.SourceWAL {
				waitStreaming(t, r, 30*time.Second)
			}
			e.write(5)
			if err := pub.WaitDistinct(ctx(t), 5); err != nil {
				t.Fatalf("published %d of 5 over TLS: %v", pub.Distinct(), err)
			}
			if source == outbox.SourceWAL {
				if st := r.SourceStatus(); !st.Streaming {
					t.Errorf("the WAL relay delivered but does not stream: %+v", st)
				}
			}
			stop()
		})
	}
}

// A certificate the client refuses ends Run at start with one line naming
// it, for either source: it is a configuration error, not an outage to wait
// out.
func TestRelayTLSRefused(t *testing.T) {
	t.Parallel()
	s := testdb.TLS(t)
	otherCA := testdb.OtherCA(t)
	for _, c := range []struct {
		name, dsn, want string
	}{
		{"other CA", s.URLWith("", map[string]string{"sslrootcert": otherCA}), "is not signed by the CA in sslrootcert=" + otherCA},
		{"wrong host", s.URLWith("127.0.0.2", nil), "is valid for 127.0.0.1, localhost, not 127.0.0.2"},
	} {
		for _, source := range []outbox.Source{outbox.SourceTable, outbox.SourceWAL} {
			t.Run(c.name+"/"+string(source), func(t *testing.T) {
				t.Parallel()
				pool, err := pgxpool.New(ctx(t), c.dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Source: source,
					OutageBackoff: outbox.Backoff{Base: time.Millisecond, Max: time.Millisecond}})
				if err != nil {
					t.Fatal(err)
				}
				runErr := make(chan error, 1)
				go func() { runErr <- r.Run(ctx(t)) }()
				select {
				case err = <-runErr:
				case <-time.After(20 * time.Second):
					t.Fatal("Run still retrying after 20s; want it to return the TLS error")
				}
				if !errors.Is(err, outbox.ErrDatabaseTLS) {
					t.Fatalf("Run = %v; want ErrDatabaseTLS", err)
				}
				if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
					t.Errorf("Run = %q; want one line saying %q", msg, c.want)
				}
			})
		}
	}
}
