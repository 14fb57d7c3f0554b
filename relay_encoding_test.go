package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// encodedPool is a pool on a fresh database of the server encoding enc,
// migrated in a schema of its own, with client_encoding set as given ("" =
// the server's default, which is the database's encoding).
func encodedPool(t *testing.T, dsn, schema, clientEncoding string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if clientEncoding != "" {
		cfg.ConnConfig.RuntimeParams["client_encoding"] = clientEncoding
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestRelayLatin1Database: in a LATIN1 database an accented event type
// (commande.créée, stored in LATIN1) reaches the broker as UTF-8 with
// either source, and its metrics are recorded; a pool left in the
// database's client encoding is refused at start with an error naming the
// setting, instead of sending LATIN1 bytes as if they were UTF-8 (and
// crashing on the first Prometheus label).
func TestRelayLatin1Database(t *testing.T) {
	t.Parallel()
	dsn := testdb.Logical(t).DatabaseEncoded(t, "LATIN1") // the WAL source needs wal_level=logical
	for _, source := range []outbox.Source{outbox.SourceTable, outbox.SourceWAL} {
		t.Run(string(source), func(t *testing.T) {
			schema := testdb.NewSchemaName("enc")
			pool := encodedPool(t, dsn, schema, "UTF8")
			c := ctx(t)
			if _, err := pool.Exec(c, `CREATE SCHEMA `+schema); err != nil {
				t.Fatal(err)
			}
			mc := outbox.MigrateConfig{Schema: schema}
			if _, err := outbox.Migrate(c, pool, mc); err != nil {
				t.Fatal(err)
			}
			cfg := outbox.RelayConfig{Schema: schema, PollInterval: 20 * time.Millisecond}
			if source == outbox.SourceWAL {
				if _, err := outbox.SetupReplication(c, pool, mc); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					if err := outbox.DropReplication(c, pool, mc); err != nil {
						t.Errorf("DropReplication: %v", err)
					}
				})
				cfg = walConfig(cfg)
			}
			// The database's own client encoding: refused, naming the fix.
			latin := encodedPool(t, dsn, schema, "")
			r, err := outbox.NewRelay(latin, memory.New(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Run(c); !errors.Is(err, outbox.ErrClientEncoding) || !strings.Contains(err.Error(), "client_encoding=UTF8") {
				t.Fatalf("Run on a LATIN1 connection = %v, want an error naming client_encoding=UTF8", err)
			}

			mem := memory.New()
			reg := prometheus.NewRegistry()
			cfg.Registerer = reg
			r, err = outbox.NewRelay(pool, mem, cfg)
			if err != nil {
				t.Fatal(err)
			}
			rc, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(rc) }()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})
			if source == outbox.SourceWAL {
				waitStreaming(t, r, 30*time.Second)
			}
			// The article's plain INSERT, sent in UTF-8, stored in LATIN1.
			if _, err := pool.Exec(c, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('commande', 'c-1', 'commande.créée', '{"client": "Hélène"}')`); err != nil {
				t.Fatal(err)
			}
			if err := mem.WaitDistinct(c, 1); err != nil {
				t.Fatal(err)
			}
			m := mem.Messages()[0]
			if m.EventType != "commande.créée" || !strings.Contains(string(m.Payload), "Hélène") {
				t.Fatalf("delivered %q with payload %s, want commande.créée and Hélène in UTF-8", m.EventType, m.Payload)
			}
			// Recorded once the batch is: just after the publish.
			testkit.Eventually(testkit.WithDetail(t, func() string {
				return fmt.Sprintf("outbox_events_published_total = %v", gauge(t, reg, "outbox_events_published_total"))
			}), 10*time.Second, "outbox_events_published_total 1", func() bool { return gauge(t, reg, "outbox_events_published_total") == 1 })
		})
	}
}
