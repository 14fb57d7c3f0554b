package outboxcli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/memory"
)

// TestReplayUsageErrors: replay refuses a missing or unknown mode, no
// selector, a bad time, rate or id, and an empty window, with exit 2.
func TestReplayUsageErrors(t *testing.T) {
	f := setup(t)
	f.write("order.created", 2)
	f.exec(`UPDATE outbox_events SET processed_at = now()`) // delivered: replayable
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	for _, args := range [][]string{
		{"replay", "--type", "order.created"},                            // no mode
		{"replay", "--mode", "copy", "--all"},                            // bad mode
		{"replay", "--mode", "new-id"},                                   // no selector
		{"replay", "--mode", "new-id", "--since", "yesterday"},           // bad time
		{"replay", "--mode", "new-id", "--all", "--rate", "-1"},          // bad rate
		{"replay", "--mode", "new-id", "not-a-uuid"},                     // bad id
		{"replay", "--mode", "new-id", "--since", "1h", "--until", "2h"}, // empty window
	} {
		r := run(t, vars, args...)
		wantExit(t, r, ExitUsage)
	}
	if n := f.count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d copies queued by refused replays", n)
	}
}

// TestReplayCommands runs replay (dry run, real, JSON), status's replayed
// line, replay list and replay cancel, and their exit codes.
func TestReplayCommands(t *testing.T) {
	f := setup(t)
	ids := f.write("order.created", 3)
	f.write("order.paid", 2)
	f.exec(`UPDATE outbox_events SET processed_at = now()`) // delivered
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema

	r := run(t, vars, "replay", "--mode", "new-id", "--type", "order.created", "--dry-run", "--sample", "2")
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "dry run: would replay 3 event(s)") || !strings.Contains(r.stdout, ids[0].String()) ||
		!strings.Contains(r.stdout, ids[1].String()) || strings.Contains(r.stdout, ids[2].String()) {
		t.Errorf("dry run output:\n%s", r)
	}
	if n := f.count("processed_at IS NULL"); n != 0 {
		t.Fatalf("dry run queued %d rows", n)
	}

	r = run(t, vars, "replay", "--mode", "new-id", "--type", "order.created", "--since", "1h", "--json")
	wantExit(t, r, ExitOK)
	var res struct {
		Table  string
		ID     uuid.UUID
		Queued int64
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Queued != 3 || res.ID == uuid.Nil {
		t.Fatalf("replay --json: %+v (%v)\n%s", res, err, r)
	}
	if n := f.count("processed_at IS NULL AND replay_id = $1", res.ID); n != 3 {
		t.Errorf("%d copies pending, want 3", n)
	}

	r = run(t, vars, "status")
	wantExit(t, r, ExitOK)
	if !regexp.MustCompile(`replayed\s+3 pending \(counted in pending\), 0 delivered`).MatchString(r.stdout) {
		t.Errorf("status lacks the replayed line:\n%s", r.stdout)
	}
	r = run(t, vars, "status", "--json")
	var st struct{ Replayed admin.ReplayTotals }
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Replayed.Pending != 3 || st.Replayed.Active != 1 {
		t.Errorf("status --json replayed: %+v (%v)", st.Replayed, err)
	}

	r = run(t, vars, "replay", "list")
	wantExit(t, r, ExitOK)
	if !regexp.MustCompile(res.ID.String() + `\s+\S+\s+new-id\s+queued\s+3\s+3\s+3\s+0\s+0`).MatchString(r.stdout) {
		t.Errorf("replay list:\n%s", r.stdout)
	}

	r = run(t, vars, "replay", "cancel", res.ID.String())
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "removed 3 copy(ies) not yet delivered") {
		t.Errorf("replay cancel:\n%s", r)
	}
	if n := f.count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d rows pending after the cancel", n)
	}
	r = run(t, vars, "replay", "list", "--json")
	var list []admin.ReplayInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].State != "cancelled" {
		t.Errorf("replay list --json after cancel: %+v (%v)", list, err)
	}
	wantExit(t, run(t, vars, "replay", "cancel", uuid.NewString()), ExitNotFound)
	wantExit(t, run(t, vars, "replay", "cancel"), ExitUsage)

	// A replay whose copies were all delivered is done: cancel says so and
	// leaves it done.
	r = run(t, vars, "replay", "--mode", "new-id", "--type", "order.created", "--json")
	wantExit(t, r, ExitOK)
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(f.pool, memory.New(), outbox.RelayConfig{Schema: f.schema})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := relay.ProcessBatch(testCtx(t)); err != nil || b.Published != 3 {
		t.Fatalf("relay the copies: %+v, %v", b, err)
	}
	r = run(t, vars, "replay", "cancel", res.ID.String())
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "had already finished (3 copy(ies) delivered, none pending): nothing to cancel") {
		t.Errorf("replay cancel of a finished replay:\n%s", r)
	}
	r = run(t, vars, "replay", "list", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[0].ID != res.ID || list[0].State != "done" {
		t.Errorf("replay list --json after cancelling a finished replay: %+v (%v)", list, err)
	}
}

// TestCancelCommand: cancel deletes pending events and exits 6 naming the
// published and unknown ids on one line.
func TestCancelCommand(t *testing.T) {
	f := setup(t)
	ids := f.write("order.created", 3)
	f.exec(`UPDATE outbox_events SET processed_at = now() WHERE id = $1`, ids[0])
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema

	r := run(t, vars, "cancel", ids[1].String())
	wantExit(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, "cancelled 1 event(s)") || f.count("id = $1", ids[1]) != 0 {
		t.Errorf("cancel:\n%s", r)
	}
	unknown := uuid.NewString()
	r = run(t, vars, "cancel", ids[0].String(), ids[2].String(), unknown)
	wantExit(t, r, ExitNotFound)
	if !strings.Contains(r.stderr, "1 id(s) already published, not cancelled: "+ids[0].String()) || !strings.Contains(r.stderr, "1 id(s) unknown: "+unknown) {
		t.Errorf("cancel stderr:\n%s", r)
	}
	if f.count("id = $1", ids[2]) != 0 || f.count("id = $1", ids[0]) != 1 {
		t.Error("cancel did not delete the pending event, or deleted the published one")
	}
	wantExit(t, run(t, vars, "cancel"), ExitUsage)
	wantExit(t, run(t, vars, "cancel", "x"), ExitUsage)
}

// TestArchiveCommand: archive moves published rows and leaves pending ones.
func TestArchiveCommand(t *testing.T) {
	f := setup(t)
	ids := f.write("order.created", 3)
	f.exec(`UPDATE outbox_events SET processed_at = now() - interval '2 hours' WHERE id <> $1`, ids[2])
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	wantExit(t, run(t, vars, "archive"), ExitUsage)
	r := run(t, vars, "archive", "--older-than", "1h", "--archive-batch", "1", "--json")
	wantExit(t, r, ExitOK)
	var out archiveJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Moved != 2 {
		t.Fatalf("archive --json: %+v (%v)\n%s", out, err, r)
	}
	if f.count("true") != 1 {
		t.Errorf("%d rows left, want the pending one", f.count("true"))
	}
	var archived int
	if err := f.pool.QueryRow(testCtx(t), `SELECT count(*) FROM outbox_events_archive`).Scan(&archived); err != nil || archived != 2 {
		t.Errorf("archive table holds %d (%v)", archived, err)
	}
}

// TestReplayByIDs: ids that select nothing are named and exit 6; the
// others are replayed.
func TestReplayByIDs(t *testing.T) {
	f := setup(t)
	ids := f.write("order.created", 2)
	f.exec(`UPDATE outbox_events SET processed_at = now() WHERE id = $1`, ids[0])
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	unknown := uuid.NewString()
	r := run(t, vars, "replay", "--mode", "same-id", ids[0].String(), ids[1].String(), unknown)
	wantExit(t, r, ExitNotFound)
	if !strings.Contains(r.stdout, "queued 1 of 1 selected") || !strings.Contains(r.stderr, ids[1].String()) || !strings.Contains(r.stderr, unknown) {
		t.Errorf("replay by ids:\n%s", r)
	}
	if f.count("id = $1 AND processed_at IS NULL AND replay_id IS NOT NULL", ids[0]) != 1 {
		t.Error("the delivered event was not re-queued under its id")
	}
}

// TestStatusBeforeMigration5: status still works on a table without the
// replay column (version 4), without the replayed line.
func TestStatusBeforeMigration5(t *testing.T) {
	f := setup(t)
	f.write("order.created", 1)
	f.exec(`ALTER TABLE outbox_events DROP COLUMN replay_id`)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	r := run(t, vars, "status")
	wantExit(t, r, ExitOK)
	if strings.Contains(r.stdout, "replayed") || !strings.Contains(r.stdout, "pending           1") {
		t.Errorf("status on a version-4 table:\n%s", r)
	}
	r = run(t, vars, "replay", "--mode", "new-id", "--all")
	wantExit(t, r, ExitNotMigrated)
}
