package outbox_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// A relay that streams committed events from the WAL instead of claiming
// them from the table. SetupReplication (or `outbox migrate --source wal`)
// creates the publication, the slot and the handoff index once, as a role
// that owns the table; the relay's role needs REPLICATION. Run as many
// relays as you like: one streams, the others stand by and take over.
func ExampleSourceWAL() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{}); err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.SetupReplication(ctx, pool, outbox.MigrateConfig{}); err != nil {
		// errors.Is(err, outbox.ErrReplicationPrerequisite): the message
		// names the setting (wal_level, REPLICATION, ...) and its fix.
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Source: outbox.SourceWAL})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); errors.Is(err, outbox.ErrReplicationPrerequisite) {
		log.Fatalf("the WAL source cannot run here: %v", err)
	} else if err != nil {
		log.Fatal(err)
	}
}

// The WAL source on a partitioned table: delivered events leave it a
// partition at a time, so it stays small with no vacuum. Partitioned
// applies to a table that does not exist yet; the relay's role must own it
// to rotate its partitions.
func ExampleMigrateConfig_partitioned() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	mc := outbox.MigrateConfig{Partitioned: true}
	if _, err := outbox.Migrate(ctx, pool, mc); errors.Is(err, outbox.ErrNotPartitioned) {
		log.Fatalf("the outbox table exists already, unpartitioned: %v", err)
	} else if err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.SetupReplication(ctx, pool, mc); err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{
		Source:       outbox.SourceWAL,
		RotateEvents: 100_000, // a new partition every 100k events
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
