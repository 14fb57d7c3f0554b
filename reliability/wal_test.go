package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/wal"
)

// The WAL source's scenarios (rows 15a-15i) run the same relay processes
// with --source wal on a table prepared as an operator would, with
// `outbox migrate --source wal`. Each scenario has a schema of its own,
// hence a slot of its own (pgoutbox_<schema>_outbox_events_<hash>), dropped
// when the test ends; on the shared server testdb.ReplicationObjects fails
// a test that leaves it behind.

// walClusterConf is the configuration of a WAL scenario's private cluster.
const walClusterConf = "wal_level = logical\n"

// walCluster starts a private cluster for a WAL scenario. Most WAL
// scenarios run on one: a walsender decodes every transaction its server
// writes, so on the shared server a stream falls behind the other
// scenarios' bulk writes (a 100k-row transaction, a million-row backlog)
// and the scenario would measure that instead of its fault. Slot dropped
// (row 15f) runs on the shared server, under testdb.ReplicationObjects,
// when the shared server is logical (on a private cluster otherwise).
func walCluster(t *testing.T) *pgCluster {
	t.Helper()
	return startClusterConf(t, walClusterConf)
}

// setupWAL runs `outbox migrate --source wal` on the scenario's table and
// registers the slot's removal. onCluster: the database is a private
// cluster, which the guard of the shared server does not see, so the
// removal is checked here.
func (e *env) setupWAL(onCluster, partitioned bool) {
	t := e.t
	t.Helper()
	in, err := ident.New(e.schema, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	n := wal.NamesFor(in, cfg.Database)
	e.wal, e.walSlot, e.walPublication = true, n.Slot, n.Publication
	if onCluster {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if s := e.slotInfo(ctx); s.exists {
				t.Errorf("the test left replication slot %s behind on its cluster", e.walSlot)
			}
		})
	} else {
		testdb.ReplicationObjects(t, n.Slot, n.Publication)
	}
	t.Cleanup(func() {
		// Relays are stopped by now (their cleanups run first); DropReplication
		// also ends a stream that is still open.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := outbox.DropReplication(ctx, e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil {
			t.Errorf("drop the WAL source's slot %s: %v", e.walSlot, err)
		}
	})
	args := []string{"migrate", "--source", "wal", "--json", "--schema", e.schema}
	if partitioned {
		args = append(args, "--partitioned")
	}
	code, stdout, stderr := e.outbox(60*time.Second, args...)
	if code != 0 {
		t.Fatalf("outbox migrate --source wal: exit %d: %s%s", code, stdout, stderr)
	}
	var out struct {
		Slot        string `json:"slot"`
		Publication string `json:"publication"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("outbox migrate --source wal --json: %v: %s", err, stdout)
	}
	if out.Slot != n.Slot || out.Publication != n.Publication {
		t.Fatalf("outbox migrate --source wal made slot %q and publication %q, want %q and %q", out.Slot, out.Publication, n.Slot, n.Publication)
	}
	e.walStarted = time.Now()
}

// outbox runs the outbox command on the scenario's database and returns its
// exit code and output.
func (e *env) outbox(timeout time.Duration, args ...string) (int, string, string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, outboxBin, args...)
	cmd.Env = childEnv(map[string]string{"DATABASE_URL": e.dbURL})
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	e.t.Fatalf("outbox %s: %v", strings.Join(args, " "), err)
	return -1, "", ""
}

// slotState is the scenario's slot as pg_replication_slots shows it.
type slotState struct {
	exists    bool
	active    bool
	pid       int    // the walsender's pid, 0 when inactive
	walStatus string // reserved, extended, unreserved, lost
	lagBytes  int64  // pg_current_wal_lsn() - confirmed_flush_lsn
}

func (e *env) slotInfo(ctx context.Context) slotState {
	var s slotState
	var pid *int32
	var status *string
	var lag *int64
	err := e.pool.QueryRow(ctx, `SELECT active, active_pid, wal_status,
	pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
FROM pg_replication_slots WHERE slot_name = $1`, e.walSlot).Scan(&s.active, &pid, &status, &lag)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s
	case err != nil:
		e.t.Errorf("read slot %s: %v", e.walSlot, err)
		return s
	}
	s.exists = true
	if pid != nil {
		s.pid = int(*pid)
	}
	if status != nil {
		s.walStatus = *status
	}
	if lag != nil {
		s.lagBytes = *lag
	}
	return s
}

// waitSlotActive waits until a walsender other than notPID streams the slot
// and returns its pid and how long that took.
func (e *env) waitSlotActive(notPID int, d time.Duration) (int, time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s := e.slotInfo(ctx)
		cancel()
		if s.active && s.pid != 0 && s.pid != notPID {
			return s.pid, time.Since(start), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, time.Since(start), false
}

// walRate is how many events the writers committed per d, on average since
// the slot was created: what a stream restarted from the slot's confirmed
// position (reported about once a second) may deliver a second time.
func (e *env) walRate(d time.Duration) int {
	committed, _, _ := e.hist.Counts()
	el := time.Since(e.walStarted)
	if el <= 0 {
		return 0
	}
	return int(float64(committed) * float64(d) / float64(el))
}

// walDetails describes the slot and the table at the end of a WAL scenario.
func walDetails(e *env) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s := e.slotInfo(ctx)
	var rows, handed int
	if err := e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE retry_after IS NOT NULL) FROM `+e.table).Scan(&rows, &handed); err != nil {
		e.t.Errorf("count rows: %v", err)
	}
	return []string{
		fmt.Sprintf("WAL source: relays run with --source wal on slot %s (wal_status %s at the end); %d rows left in the table (the WAL source deletes the rows it delivered; %d were handed to the table path), so attempts burned counts the rows still there",
			e.walSlot, s.walStatus, rows, handed),
	}
}

// metric reads one sample of a Prometheus metric from the relay's /metrics
// (the first whose name and labels start with name), -1 if absent.
func metric(addr, name string) float64 {
	code, body := httpGet(addr, "/metrics")
	if code != 200 {
		return -1
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			return v
		}
	}
	return -1
}
