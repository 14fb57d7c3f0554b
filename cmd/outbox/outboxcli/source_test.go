package outboxcli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
	"github.com/pgoutbox/outbox/internal/wal"
)

// --source reaches RelayConfig.Source from the flag, OUTBOX_SOURCE and the
// config file, as every relay setting does; migrate reads the same setting.
func TestRelaySourceSetting(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "outbox.yaml")
	if err := os.WriteFile(file, []byte("source: wal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		args []string
		want outbox.Source
	}{
		{"default", nil, nil, outbox.SourceTable},
		{"flag", nil, []string{"--source", "wal"}, outbox.SourceWAL},
		{"env", map[string]string{"OUTBOX_SOURCE": "wal"}, nil, outbox.SourceWAL},
		{"file", nil, []string{"--config", file}, outbox.SourceWAL},
		{"flag over env and file", map[string]string{"OUTBOX_SOURCE": "wal", "OUTBOX_CONFIG": file}, []string{"--source", "table"}, outbox.SourceTable},
	} {
		o, _ := relayCommand()
		if err := o.parse(tc.args, env(tc.vars), nil); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var s relaySettings
		s.source = o.fs.Lookup("source").Value.String()
		if got := s.relayConfig(nil, nil).Source; got != tc.want {
			t.Errorf("%s: RelayConfig.Source = %q, want %q", tc.name, got, tc.want)
		}
		mo, _ := migrateCommand()
		if err := mo.parse(tc.args, env(tc.vars), nil); err != nil {
			t.Fatalf("%s: migrate: %v", tc.name, err)
		}
		if got := mo.fs.Lookup("source").Value.String(); got != string(tc.want) {
			t.Errorf("%s: migrate --source = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// An unknown source is a usage error naming the flag, the allowed values
// and where the value came from, before the database is touched.
func TestRelaySourceUnknown(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "outbox.yaml")
	if err := os.WriteFile(file, []byte("broker: \"stdout:\"\nsource: logical\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noDB := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none"}
	withEnv := func(k, v string) map[string]string {
		m := map[string]string{"DATABASE_URL": noDB["DATABASE_URL"], k: v}
		return m
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		args []string
		want string
	}{
		{"flag", noDB, []string{"relay", "--broker", "stdout:", "--source", "kafka"},
			`outbox: --source: "kafka" is not a source (want table or wal)`},
		{"env", withEnv("OUTBOX_SOURCE", "polling"), []string{"relay", "--broker", "stdout:"},
			`outbox: --source: "polling" is not a source (want table or wal) (set by OUTBOX_SOURCE)`},
		{"file", noDB, []string{"relay", "--config", file},
			`outbox: --source: "logical" is not a source (want table or wal) (set by ` + file + ` line 2)`},
		{"migrate env", withEnv("OUTBOX_SOURCE", "polling"), []string{"migrate"},
			`outbox: --source: "polling" is not a source (want table or wal) (set by OUTBOX_SOURCE)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tc.vars, tc.args...)
			wantExit(t, r, ExitUsage)
			if got := strings.TrimSpace(r.stderr); got != tc.want {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	r := run(t, nil, "relay", "--help")
	if !regexp.MustCompile(`--source string +where events come from: table .* or wal .*\(default table; env OUTBOX_SOURCE\)`).MatchString(r.stdout) {
		t.Errorf("relay --help does not document --source:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "  2  usage or configuration error (nothing was done); also relay and\n     migrate with --source wal: a logical replication prerequisite is") {
		t.Errorf("relay --help: the exit codes do not name the missing replication prerequisite:\n%s", r.stdout)
	}
}

// A WAL relay on a table migrated for the table source only is told to run
// outbox migrate --source wal.
func TestRelaySourceNotMigratedHint(t *testing.T) {
	t.Parallel()
	s := relaySettings{source: "wal", db: dbOptions{Schema: "app"}}
	err := s.notMigrated(outbox.ErrNotMigrated)
	if want := `table "app"."outbox_events" is missing or not migrated: run outbox migrate --source wal --schema app`; err == nil || err.Error() != want {
		t.Errorf("WAL relay, not migrated: %v\nwant: %s", err, want)
	}
	s.source = "table"
	if err := s.notMigrated(outbox.ErrNotMigrated); err == nil || strings.Contains(err.Error(), "--source") {
		t.Errorf("table relay, not migrated: %v", err)
	}
	// A missing prerequisite from Relay.Run: exit 2, its own line.
	prereq := &wal.PrereqError{Setting: "wal_level", Have: "replica", Fix: "set wal_level = logical and restart"}
	err = replicationErr(s.notMigrated(fmt.Errorf("outbox: %w", prereq)))
	if exitCode(err) != ExitUsage || !errors.Is(err, outbox.ErrReplicationPrerequisite) || err.Error() != "outbox: "+prereq.Error() {
		t.Errorf("prerequisite missing: exit %d, %v", exitCode(err), err)
	}
}

// /readyz: a WAL relay counts as ready while it streams, stands by or falls
// back to the table (it delivers in each case), not while it has no stream
// yet; the body's source line says which.
func TestReadyzSource(t *testing.T) {
	t.Parallel()
	lost := errors.New("WAL source: slot pgoutbox_x lost")
	for _, tc := range []struct {
		name  string
		st    outbox.SourceStatus
		ready bool
		line  string
	}{
		{"table", outbox.SourceStatus{Source: outbox.SourceTable, Active: outbox.SourceTable}, true,
			"source=table active=table"},
		{"streaming", outbox.SourceStatus{Source: outbox.SourceWAL, Active: outbox.SourceWAL, Slot: "pgoutbox_x", Streaming: true, Confirmed: "0/16B3748"}, true,
			"source=wal active=wal slot=pgoutbox_x state=streaming confirmed=0/16B3748"},
		{"standby", outbox.SourceStatus{Source: outbox.SourceWAL, Active: outbox.SourceWAL, Slot: "pgoutbox_x", Standby: true}, true,
			"source=wal active=wal slot=pgoutbox_x state=standby"},
		{"fallback", outbox.SourceStatus{Source: outbox.SourceWAL, Active: outbox.SourceTable, Slot: "pgoutbox_x", Err: lost}, true,
			`source=wal active=table slot=pgoutbox_x state=fallback err="WAL source: slot pgoutbox_x lost"`},
		{"starting", outbox.SourceStatus{Source: outbox.SourceWAL, Active: outbox.SourceWAL, Slot: "pgoutbox_x"}, false,
			"source=wal active=wal slot=pgoutbox_x state=starting"},
		{"stream broken", outbox.SourceStatus{Source: outbox.SourceWAL, Active: outbox.SourceWAL, Slot: "pgoutbox_x", Err: errors.New("conn closed\nby server")}, false,
			`source=wal active=wal slot=pgoutbox_x state=starting err="conn closed; by server"`},
	} {
		err := sourceReady(tc.st)
		if (err == nil) != tc.ready {
			t.Errorf("%s: sourceReady = %v, want ready %v", tc.name, err, tc.ready)
		}
		if !tc.ready && (err == nil || !strings.Contains(err.Error(), "pgoutbox_x")) {
			t.Errorf("%s: the reason does not name the slot: %v", tc.name, err)
		}
		if got := sourceLine(tc.st); got != tc.line {
			t.Errorf("%s: sourceLine = %q, want %q", tc.name, got, tc.line)
		}
	}
}

// outbox status shows the WAL source's slot when it exists: who streams it,
// wal_status, the lag from the confirmed position and the WAL retained, in
// text and JSON; nothing about a source when it does not.
func TestStatusWALSlot(t *testing.T) {
	f := setupLogical(t)
	ctx := testCtx(t)
	in, err := ident.New(f.schema, "")
	if err != nil {
		t.Fatal(err)
	}
	n := wal.NamesFor(in, testdb.Logical(t).DatabaseName())

	r := run(t, walEnv(t), "status", "--schema", f.schema)
	wantExit(t, r, ExitOK)
	if strings.Contains(r.stdout, "source") {
		t.Errorf("status without a slot shows a source:\n%s", r.stdout)
	}
	r = run(t, walEnv(t), "status", "--schema", f.schema, "--json")
	wantExit(t, r, ExitOK)
	if strings.Contains(r.stdout, `"source"`) {
		t.Errorf("status --json without a slot has a source:\n%s", r.stdout)
	}

	testdb.Logical(t).ReplicationObjects(t, n.Slot, n.Publication)
	pool := testdb.Logical(t).Pool(t, "")
	if _, err := wal.Create(ctx, pool, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := wal.Drop(context.Background(), pool, n); err != nil {
			t.Errorf("drop slot: %v", err)
		}
	})
	// WAL written after the slot's creation, which nobody confirms.
	f.write("order.created", 50)

	// The server's figures before and after status: nobody confirms the
	// slot, so both only grow (other tests write WAL meanwhile), and status's
	// must lie between.
	slotBytes := func() (lag, retained int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
			pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, n.Slot).Scan(&lag, &retained); err != nil {
			t.Fatal(err)
		}
		return lag, retained
	}
	lag0, retained0 := slotBytes()
	r = run(t, walEnv(t), "status", "--schema", f.schema, "--json")
	wantExit(t, r, ExitOK)
	lag1, retained1 := slotBytes()
	var js struct {
		Table  string
		Source *struct {
			Slot          string `json:"slot"`
			Active        bool   `json:"active"`
			ActivePID     *int32 `json:"active_pid"`
			WALStatus     string `json:"wal_status"`
			Confirmed     string `json:"confirmed_flush_lsn"`
			LagBytes      *int64 `json:"lag_bytes"` // a pointer: present
			RetainedBytes *int64 `json:"retained_bytes"`
		} `json:"source"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	s := js.Source
	if s == nil {
		t.Fatalf("status --json has no source with slot %s:\n%s", n.Slot, r.stdout)
	}
	if s.Slot != n.Slot || s.Active || s.ActivePID != nil || s.WALStatus != "reserved" || s.Confirmed == "" {
		t.Errorf("source = %+v", *s)
	}
	// 50 events are several KiB of WAL: both figures count them.
	if s.LagBytes == nil || s.RetainedBytes == nil || lag0 < 5000 {
		t.Fatalf("lag %v, retained %v (server: lag %d before status)", deref(s.LagBytes), deref(s.RetainedBytes), lag0)
	}
	if *s.LagBytes < lag0 || *s.LagBytes > lag1 || *s.RetainedBytes < retained0 || *s.RetainedBytes > retained1 {
		t.Errorf("status said lag %d, retained %d; the server said %d..%d and %d..%d", *s.LagBytes, *s.RetainedBytes, lag0, lag1, retained0, retained1)
	}

	wantStatusStreamed(t, f, pool, n)
}

// wantStatusStreamed opens a stream of slot n as a relay does and checks
// that status shows it active, with its walsender's pid and its figures.
func wantStatusStreamed(t *testing.T, f *fixture, pool *pgxpool.Pool, n wal.Names) {
	t.Helper()
	ctx := testCtx(t)
	stream, err := wal.Open(ctx, wal.StreamConfig{ConnString: testdb.Logical(t).URL(), Names: n})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close(context.Background())
	var pid int32
	if err := pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, n.Slot).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	r := run(t, walEnv(t), "status", "--schema", f.schema)
	wantExit(t, r, ExitOK)
	for _, re := range []string{
		`\nsource: WAL, replication slot ` + n.Slot + `\n`,
		`\n  streamed by +walsender pid ` + strconv.Itoa(int(pid)) + ` \(active\)\n`,
		`\n  wal_status +reserved\n`,
		`\n  confirmed +[0-9A-F]+/[0-9A-F]+\n`,
		`\n  lag +[0-9.]+ (B|KiB|MiB) \(WAL written since the confirmed position\)\n`,
		`\n  retained +[0-9.]+ (B|KiB|MiB) \(WAL the slot keeps on the server's disk\)\n`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("status lacks %q:\n%s", re, r.stdout)
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := byteSize(&n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
	if got := byteSize(nil); got != "-" {
		t.Errorf("byteSize(nil) = %q", got)
	}
}

// outbox relay --source wal: the relay creates the slot it lacks, streams
// it, publishes to NATS what the application commits and deletes the
// delivered rows (the WAL path; the table path would mark them); /readyz
// says it streams, /metrics carries the replication series; a second relay
// on the table stands by, ready. The slot is dropped at the end.
func TestRelaySourceWAL(t *testing.T) {
	f := setupLogical(t)
	in, err := ident.New(f.schema, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := testdb.Logical(t)
	n := wal.NamesFor(in, srv.DatabaseName())
	srv.ReplicationObjects(t, n.Slot, n.Publication)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := wal.Drop(ctx, f.pool, n); err != nil {
			t.Errorf("drop slot: %v", err)
		}
	})
	nc := testnats.Conn(t)
	stream, prefix := testnats.Stream(t, nc)

	vars := walEnv(t)
	vars["OUTBOX_BROKER"] = testnats.URL()
	vars["OUTBOX_SCHEMA"] = f.schema
	vars["OUTBOX_SOURCE"] = "wal"
	vars["OUTBOX_STATS_INTERVAL"] = "50ms"
	args := []string{"--topic", prefix + ".{event_type}", "--http-addr", "127.0.0.1:0", "--poll-interval", "20ms"}
	r := startRelay(t, &bytes.Buffer{}, vars, args...)
	addr := r.httpAddr(t)
	var body string
	eventually(t, "/readyz: streaming", func() bool {
		var code int
		code, body = get(t, "http://"+addr+"/readyz")
		return code == 200 && strings.Contains(body, " state=streaming")
	})
	if want := regexp.MustCompile(`^ready\nsource=wal active=wal slot=` + n.Slot + ` state=streaming( confirmed=[0-9A-F]+/[0-9A-F]+)?\n$`); !want.MatchString(body) {
		t.Errorf("/readyz while streaming: %q", body)
	}

	ids := f.write("order.created", 200)
	eventually(t, "every event delivered and its row deleted", func() bool { return f.count("true") == 0 })
	got := streamIDs(t, stream)
	for _, id := range ids {
		if got[id] == 0 {
			t.Errorf("event %s deleted but not in the stream", id)
		}
	}
	var metrics string
	eventually(t, "the replication gauges", func() bool {
		_, metrics = get(t, "http://"+addr+"/metrics")
		return strings.Contains(metrics, "\noutbox_replication_slot_state{state=\"reserved\"} 1\n")
	})
	for _, want := range []string{"\noutbox_relay_source{source=\"wal\"} 1\n", "\noutbox_replication_streaming 1\n",
		"\noutbox_replication_fallbacks_total 0\n", "\noutbox_replication_lag_bytes ", "\noutbox_replication_retained_bytes ",
		"\noutbox_events_published_total 200\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
	if st := run(t, walEnv(t), "status", "--schema", f.schema); !strings.Contains(st.stdout, "source: WAL, replication slot "+n.Slot+"\n  streamed by       walsender pid ") {
		t.Errorf("status while a relay streams:\n%s", st)
	}

	// A second relay stands by: ready, and says so.
	r2 := startRelay(t, &bytes.Buffer{}, vars, args...)
	addr2 := r2.httpAddr(t)
	eventually(t, "/readyz of the second relay: standby", func() bool {
		var code int
		code, body = get(t, "http://"+addr2+"/readyz")
		return code == 200 && strings.Contains(body, " state=standby")
	})
	if code := r2.stop(t); code != ExitOK {
		t.Errorf("second relay: exit %d; stderr:\n%s", code, r2.stderr)
	}
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d after SIGTERM; stderr:\n%s", code, r.stderr)
	}
	if !strings.Contains(r.stderr.String(), `"source":"wal"`) {
		t.Errorf("the start line does not log the source:\n%s", r.stderr)
	}
}

// A WAL relay whose role may not replicate exits 2 with the one line that
// names the missing privilege and its fix.
func TestRelaySourceWALPrerequisite(t *testing.T) {
	f := setupLogical(t)
	ctx := testCtx(t)
	dbURL := noReplicationRole(t, "pgoutbox_cli_relay_norepl_", f.schema, "USAGE", "SELECT, UPDATE, DELETE")
	var stderr syncBuffer
	code := runWith(ctx, &bytes.Buffer{}, &stderr, map[string]string{"DATABASE_URL": dbURL},
		"relay", "--source", "wal", "--schema", f.schema, "--broker", "stdout:")
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if code != ExitUsage || !strings.HasPrefix(last, "outbox: ") || !strings.Contains(last, "REPLICATION") || !strings.Contains(last, "ALTER ROLE") {
		t.Fatalf("exit %d, last line %q; want exit %d naming REPLICATION and its fix; stderr:\n%s", code, last, ExitUsage, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"outbox relay failed"`) || !strings.Contains(stderr.String(), `"exit_code":2`) {
		t.Errorf("the failure is not logged with its exit code:\n%s", stderr.String())
	}
	var slots int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, wal.NamesFor(mustNames(t, f.schema), testdb.Logical(t).DatabaseName()).Slot).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("%d slot(s) left (%v)", slots, err)
	}
}

func mustNames(t *testing.T, schema string) ident.Names {
	t.Helper()
	in, err := ident.New(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// noReplicationRole creates a login role without REPLICATION, granted
// schemaPriv on schema and tablePriv on its tables, dropped when the test
// ends, and returns the WAL tests' database URL as that role.
func noReplicationRole(t *testing.T, prefix, schema, schemaPriv, tablePriv string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	role := prefix + hex.EncodeToString(b)
	qrole, qschema := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	pool := testdb.Logical(t).Pool(t, "")
	exec := func(q string) {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE ROLE " + qrole + " LOGIN NOREPLICATION")
	t.Cleanup(func() {
		for _, q := range []string{"DROP OWNED BY " + qrole, "DROP ROLE IF EXISTS " + qrole} {
			if _, err := pool.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	exec("GRANT " + schemaPriv + " ON SCHEMA " + qschema + " TO " + qrole)
	exec("GRANT " + tablePriv + " ON ALL TABLES IN SCHEMA " + qschema + " TO " + qrole)
	u, err := url.Parse(testdb.Logical(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}
