package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/internal/wal"
	"github.com/pgoutbox/outbox/memory"
)

// indexDefs returns the definitions of the ready and aggregate indexes of
// schema's table (missing: ""), with the schema's name taken out so two
// schemas' tables compare.
func indexDefs(t *testing.T, pool *pgxpool.Pool, schema string) map[string]string {
	t.Helper()
	defs := map[string]string{}
	for _, idx := range []string{"outbox_events_ready_idx", "outbox_events_aggregate_idx"} {
		var def string
		err := pool.QueryRow(ctx(t), `SELECT coalesce((SELECT pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisvalid THEN '' ELSE ' (INVALID)' END
  FROM pg_index i WHERE i.indexrelid = to_regclass($1)), '')`, pgx.Identifier{schema, idx}.Sanitize()).Scan(&def)
		if err != nil {
			t.Fatal(err)
		}
		defs[idx] = strings.ReplaceAll(def, schema+".", "")
	}
	return defs
}

// TestSetupReplicationSetsTableUp: SetupReplication drops the indexes only
// a table source reads; a table source then refuses the table, naming the
// fix, and a WAL source accepts it. DropReplication builds them again as
// the migrations define them, an invalid leftover of a failed build
// included, and the table source accepts the table again.
func TestSetupReplicationSetsTableUp(t *testing.T) {
	e, n := setupWAL(t)
	refSchema := e.srv.Schema(t) // a table as the migrations leave it
	refPool := e.srv.Pool(t, refSchema)
	if _, err := outbox.Migrate(ctx(t), refPool, outbox.MigrateConfig{Schema: refSchema}); err != nil {
		t.Fatal(err)
	}
	want := indexDefs(t, refPool, refSchema)
	for idx, def := range want {
		if def == "" {
			t.Fatalf("migrated table has no %s", idx)
		}
	}
	for idx, def := range indexDefs(t, e.pool, e.schema) {
		if def != "" {
			t.Errorf("after SetupReplication: %s still exists: %s", idx, def)
		}
	}

	table := e.relay(memory.New(), outbox.RelayConfig{})
	err := table.CheckSchema(ctx(t))
	if !errors.Is(err, outbox.ErrNotMigrated) || !errors.Is(err, outbox.ErrTableSetUpForWAL) || !strings.Contains(err.Error(), "set up for the WAL source") || !strings.Contains(err.Error(), "drop-wal") {
		t.Errorf("table source on a table set up for the WAL source: CheckSchema = %v, want ErrNotMigrated and ErrTableSetUpForWAL naming the WAL setup and drop-wal", err)
	}
	if err := e.relay(memory.New(), walConfig(outbox.RelayConfig{})).CheckSchema(ctx(t)); err != nil {
		t.Errorf("WAL source: CheckSchema = %v", err)
	}

	// A concurrent build that failed leaves an invalid index under the name.
	e.write(2) // two rows of one aggregate type: a unique index fails
	ready := pgx.Identifier{e.schema, "outbox_events_ready_idx"}.Sanitize()
	if _, err := e.pool.Exec(ctx(t), `CREATE UNIQUE INDEX CONCURRENTLY outbox_events_ready_idx ON outbox_events (aggregate_type)`); err == nil {
		t.Fatal("the unique index build succeeded; the test needs it to fail")
	}
	if got := indexDefs(t, e.pool, e.schema)["outbox_events_ready_idx"]; !strings.HasSuffix(got, "(INVALID)") {
		t.Fatalf("%s after a failed build: %q, want an invalid index", ready, got)
	}

	if err := outbox.DropReplication(ctx(t), e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil {
		t.Fatalf("DropReplication: %v", err)
	}
	got := indexDefs(t, e.pool, e.schema)
	for idx, def := range want {
		if got[idx] != def {
			t.Errorf("after DropReplication: %s = %q, want %q", idx, got[idx], def)
		}
	}
	if err := table.CheckSchema(ctx(t)); err != nil {
		t.Errorf("table source after DropReplication: CheckSchema = %v", err)
	}
	var slots int
	if err := e.pool.QueryRow(ctx(t), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, n.Slot).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("slot %s after DropReplication: %d (%v)", n.Slot, slots, err)
	}
}

// TestWALSourceFallbackHandsOver: a WAL relay whose role owns nothing (it
// has REPLICATION and the table's DML grants) loses its slot while its
// publication is gone too, so it cannot set up a fresh one. On a table set
// up for the WAL source (no index of the rows as written) it hands the
// pending rows to its table workers and delivers them meanwhile; once a DBA
// creates the publication again, it creates a fresh slot and streams.
func TestWALSourceFallbackHandsOver(t *testing.T) {
	e, n := setupWAL(t)
	admin := e.srv.Pool(t, e.schema)
	c := ctx(t)
	pool := rolePool(t, e.srv, e.schema, "walrelay_"+e.schema, "REPLICATION")
	mem := memory.New()
	r, err := outbox.NewRelay(pool, mem, walConfig(outbox.RelayConfig{Schema: e.schema,
		OutageBackoff: outbox.Backoff{Base: 100 * time.Millisecond, Max: 500 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	waitStreaming(t, r, 30*time.Second)
	var all []uuid.UUID
	all = append(all, e.write(10)...)
	if err := mem.WaitDistinct(c, len(all)); err != nil {
		t.Fatalf("streamed: %d of %d: %v", mem.Distinct(), len(all), err)
	}

	// The publication first: the relay could otherwise replace the slot.
	if _, err := admin.Exec(c, n.DropPublicationSQL()); err != nil {
		t.Fatal(err)
	}
	dropSlotUnder(t, admin, n.Slot)
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("status %+v", r.SourceStatus()) }), 20*time.Second,
		"the fallback to the table after the slot's loss", func() bool { return r.SourceStatus().Active == outbox.SourceTable })
	during := e.write(20)
	all = append(all, during...)
	wait, cancel := context.WithTimeout(c, 15*time.Second)
	err = mem.WaitDistinct(wait, len(all))
	cancel()
	if err != nil {
		t.Fatalf("while no slot could be created: %d of %d events delivered: %v (status %+v)", mem.Distinct(), len(all), err, r.SourceStatus())
	}
	if st := r.SourceStatus(); st.Active != outbox.SourceTable || st.Streaming {
		t.Errorf("status while no slot could be created: %+v, want the fallback", st)
	}
	// Handed over, then claimed through the handoff index: not claimed
	// as written, which on this table would read every row.
	var asWritten int
	if err := admin.QueryRow(c, `SELECT count(*) FROM outbox_events WHERE id = ANY($1) AND retry_after IS NULL`, during).Scan(&asWritten); err != nil {
		t.Fatal(err)
	}
	if asWritten > 0 {
		t.Errorf("%d of %d events delivered during the fallback were claimed as written, not handed over", asWritten, len(during))
	}

	if _, err := admin.Exec(c, n.CreatePublicationSQL()); err != nil {
		t.Fatal(err)
	}
	waitStreaming(t, r, 30*time.Second)
	all = append(all, e.write(10)...)
	if err := mem.WaitDistinct(c, len(all)); err != nil {
		t.Fatalf("after the fresh slot: %d of %d events delivered: %v", mem.Distinct(), len(all), err)
	}
	counts := mem.Count()
	for _, id := range all {
		if counts[id] == 0 {
			t.Errorf("event %s lost", id)
		}
	}
	if st := r.SourceStatus(); st.Active != outbox.SourceWAL {
		t.Errorf("status after the fresh slot: %+v, want streaming", st)
	}
	var handed bool
	if err := admin.QueryRow(c, `SELECT to_regclass($1) IS NULL`, pgx.Identifier{e.schema, "outbox_events_ready_idx"}.Sanitize()).Scan(&handed); err != nil || !handed {
		t.Errorf("the ready index exists (%v): the test did not run on a table set up for the WAL source", err)
	}
}

// TestReplicationSetupConcurrent: replicas running migrate --source wal at
// once, then drop-wal at once, all succeed and leave the table set up, then
// set up again for the table source with valid indexes.
func TestReplicationSetupConcurrent(t *testing.T) {
	e := setupLogical(t)
	n := walNames(t, e)
	t.Cleanup(func() { _ = wal.Drop(context.Background(), e.pool, n) })
	// Rows, so that each index build takes a while.
	if _, err := e.pool.Exec(ctx(t), `INSERT INTO `+pgx.Identifier{e.schema, "outbox_events"}.Sanitize()+
		` (aggregate_type, aggregate_id, event_type, payload) SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	cfg := outbox.MigrateConfig{Schema: e.schema}
	all := func(name string, f func() error) {
		t.Helper()
		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- f() }()
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Errorf("%s, three at once: %v", name, err)
			}
		}
	}
	all("SetupReplication", func() error { _, err := outbox.SetupReplication(ctx(t), e.pool, cfg); return err })
	for idx, def := range indexDefs(t, e.pool, e.schema) {
		if def != "" {
			t.Errorf("after SetupReplication: %s still exists: %s", idx, def)
		}
	}
	if st, err := wal.Inspect(ctx(t), e.pool, n); err != nil || !st.Exists {
		t.Fatalf("slot after SetupReplication: %+v, %v", st, err)
	}
	all("DropReplication", func() error { return outbox.DropReplication(ctx(t), e.pool, cfg) })
	for idx, def := range indexDefs(t, e.pool, e.schema) {
		if def == "" || strings.Contains(def, "INVALID") {
			t.Errorf("after DropReplication: %s is %q", idx, def)
		}
	}
}

// rolePool creates a login role with attrs (REPLICATION or NOREPLICATION)
// that may read and write the tables of schema and owns nothing, and
// returns a pool connecting as it. Cleanup drops both.
func rolePool(t *testing.T, srv *testdb.Server, schema, role, attrs string) *pgxpool.Pool {
	t.Helper()
	admin := srv.Pool(t, schema)
	q, s := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+q)
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+q)
	})
	for _, stmt := range []string{"CREATE ROLE " + q + " LOGIN " + attrs,
		"GRANT USAGE ON SCHEMA " + s + " TO " + q,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + s + " TO " + q} {
		if _, err := admin.Exec(ctx(t), stmt); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestDropReplicationSticks: DropReplication (outbox migrate drop-wal)
// refuses while a relay streams the slot, naming the relay's walsender,
// and changes nothing. Once that relay's stream is gone, the drop goes
// through and sticks: the relay, falling back, finds the publication gone,
// does not create the slot again, and relays from the table. Before, a
// running relay created slot and publication again about 100 ms later,
// and the slot then retained WAL with only table relays running.
func TestDropReplicationSticks(t *testing.T) {
	e, n := setupWAL(t)
	mem := memory.New()
	r := e.relay(mem, walConfig(outbox.RelayConfig{OutageBackoff: outbox.Backoff{Base: time.Second, Max: 2 * time.Second}}))
	sig := outbox.Signals(r)
	sig.Init()
	e.run(r)
	waitStreaming(t, r, 30*time.Second)
	cfg := outbox.MigrateConfig{Schema: e.schema}
	err := outbox.DropReplication(ctx(t), e.pool, cfg)
	if !errors.Is(err, wal.ErrSlotBusy) || !strings.Contains(err.Error(), "walsender pid") || !strings.Contains(err.Error(), "pgoutbox relay") {
		t.Fatalf("DropReplication with a relay streaming = %v, want ErrSlotBusy naming the relay", err)
	}
	if !slotExists(t, e.pool, n.Slot) || !r.SourceStatus().Streaming {
		t.Fatal("the refused drop changed something")
	}
	// The streaming connection ends (the relay is stopping, say): the drop
	// waits for it, then proceeds.
	if err := wal.Terminate(ctx(t), e.pool, n); err != nil {
		t.Fatal(err)
	}
	if err := outbox.DropReplication(ctx(t), e.pool, cfg); err != nil {
		t.Fatalf("DropReplication once the stream ended: %v", err)
	}
	ids := e.write(3)
	if err := mem.WaitFor(ctx(t), func(ms []outbox.Message) bool {
		seen := map[uuid.UUID]bool{}
		for _, m := range ms {
			seen[m.ID] = true
		}
		return seen[ids[0]] && seen[ids[1]] && seen[ids[2]]
	}); err != nil {
		t.Fatalf("events not relayed from the table after the drop: %v", err)
	}
	// The relay's attempts at a fresh slot, until one finds the source
	// removed; one made while the drop ran may fail otherwise.
	for {
		err := sig.SlotAttempt.Wait(t, 30*time.Second)
		if err == nil {
			t.Fatalf("the relay created slot %s again after DropReplication", n.Slot)
		}
		if errors.Is(err, wal.ErrRemoved) {
			break
		}
	}
	if slotExists(t, e.pool, n.Slot) {
		t.Fatalf("the relay created slot %s again after DropReplication", n.Slot)
	}
	var pub bool
	if err := e.pool.QueryRow(ctx(t), `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, n.Publication).Scan(&pub); err != nil || pub {
		t.Fatalf("publication %s exists again (%v)", n.Publication, err)
	}
}
