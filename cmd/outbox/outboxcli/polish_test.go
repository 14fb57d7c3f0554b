package outboxcli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func TestVersionFlags(t *testing.T) {
	t.Parallel()
	want := regexp.MustCompile(`^outbox \S+ \(.*go1\.\d+.*, [a-z0-9]+/[a-z0-9]+\)\n$`)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}, {"-v"}} {
		r := run(t, nil, args...)
		wantExit(t, r, ExitOK)
		if !want.MatchString(r.stdout) {
			t.Errorf("outbox %s: %q, want %s", strings.Join(args, " "), r.stdout, want)
		}
	}
	r := run(t, nil, "version", "--json")
	wantExit(t, r, ExitOK)
	var b BuildInfo
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || b.Version == "" || !strings.HasPrefix(b.GoVersion, "go") {
		t.Errorf("version --json: %v: %s", err, r.stdout)
	}
}

func TestBuildInfoFallbacks(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"v1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v0.9.0"}, Settings: vcs}, "v1.2.3"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v0.9.0"}}, "v0.9.0"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "devel-0123456789ab-dirty"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"", nil, "(devel)"},
	} {
		if got := buildInfo(c.stamped, c.bi, c.bi != nil).Version; got != c.want {
			t.Errorf("stamped %q, build info %+v: version %q, want %q", c.stamped, c.bi, got, c.want)
		}
	}
}

// Flag errors spell flags as help does, and a duration in days gets a hint.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vars map[string]string
		args []string
		want []string
	}{
		{nil, []string{"cleanup", "--retention", "7days"}, []string{`--retention: invalid value "7days"`, "168h or 7d"}},
		{nil, []string{"cleanup", "-retention", "1w"}, []string{`--retention: invalid value "1w"`, "7d"}},
		{map[string]string{"OUTBOX_RETENTION": "7x"}, []string{"cleanup"}, []string{"--retention", "7d", "OUTBOX_RETENTION"}},
		{nil, []string{"status", "-json=maybe"}, []string{`--json: invalid value "maybe"`}},
		{nil, []string{"status", "--bogus"}, []string{"unknown flag --bogus"}},
		{nil, []string{"cleanup", "--retention"}, []string{"flag needs an argument: --retention"}},
		{nil, []string{"dead-letters", "--group-by", "colour"}, []string{`--group-by: "colour": want error or type`}},
		{nil, []string{"retry", "--all", "--type", "x"}, []string{"--all cannot be combined with --type"}},
		{nil, []string{"dead-letters", "discard"}, []string{"give event ids, --all, or at least one of"}},
	} {
		r := run(t, c.vars, c.args...)
		wantExit(t, r, ExitUsage)
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("outbox %s: stderr lacks %q:\n%s", strings.Join(c.args, " "), w, r.stderr)
			}
		}
		if regexp.MustCompile(`(^|[^-])-(retention|json|bogus)\b`).MatchString(r.stderr) {
			t.Errorf("outbox %s: a flag spelled with one dash: %s", strings.Join(c.args, " "), r.stderr)
		}
	}
}

// A refused connection is reported once, not once per sslmode attempt.
func TestStatusUnreachableOnce(t *testing.T) {
	t.Parallel()
	r := run(t, map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:" + freePort(t) + "/test?connect_timeout=2"}, "status")
	wantExit(t, r, ExitDatabase)
	if n := strings.Count(r.stderr, "connection refused"); n != 1 {
		t.Errorf("connection refused printed %d times:\n%s", n, r.stderr)
	}
}

func TestMigrateStatusExitCode(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = schema
	r := run(t, vars, "migrate", "status")
	wantExit(t, r, ExitOK) // without --exit-code: the contract of old
	r = run(t, vars, "migrate", "status", "--exit-code")
	wantExit(t, r, ExitNotMigrated)
	if !strings.Contains(r.stderr, "pending: run outbox migrate") || !strings.Contains(r.stdout, "pending") {
		t.Errorf("migrate status --exit-code: %s", r)
	}
	r = run(t, vars, "migrate", "status", "--exit-code", "--json")
	if r.code != ExitNotMigrated || !strings.Contains(r.stdout, `"pending": `) {
		t.Errorf("migrate status --exit-code --json: %s", r)
	}
	r = run(t, vars, "migrate", "--json")
	wantExit(t, r, ExitOK)
	var up struct {
		Table   string `json:"table"`
		Applied []struct {
			Version int `json:"version"`
		} `json:"applied"`
		Version int `json:"version"`
	}
	all, err := outbox.Migrations(outbox.MigrateConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(r.stdout), &up); err != nil || len(up.Applied) != len(all) || up.Version != all[len(all)-1].Version {
		t.Errorf("migrate --json: %v: %s", err, r.stdout)
	}
	wantExit(t, run(t, vars, "migrate", "status", "--exit-code"), ExitOK)
}

func TestRetrySelectorsAndExitCode(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	a := f.write("a.happened", 3)
	b := f.write("b.happened", 2)
	f.deadLetter(a, "nats: no responders for subject orders.1234")
	f.deadLetter(b, "http 500 from hook 42")
	f.exec(`UPDATE outbox_events SET created_at = now() - interval '2 days' WHERE id = $1`, b[0])
	requeued := func() int { return f.count("dead_at IS NULL AND attempts = 0") }

	// An unknown id and a published one: the known one is re-queued, the
	// others named, exit 6.
	f.exec(`UPDATE outbox_events SET processed_at = now(), dead_at = NULL WHERE id = $1`, a[2])
	unknown := uuid.New()
	r := run(t, vars, "retry", a[0].String(), unknown.String(), a[2].String())
	wantExit(t, r, ExitNotFound)
	if !strings.HasPrefix(r.stdout, "re-queued 1 event(s)") || !strings.Contains(r.stderr, unknown.String()) ||
		!strings.Contains(r.stderr, a[2].String()) || strings.Contains(r.stderr, a[0].String()) || requeued() != 1 {
		t.Errorf("retry with unknown ids: %s; %d re-queued", r, requeued())
	}
	// --json, dry run.
	r = run(t, vars, "retry", "--json", "--dry-run", "--older-than", "24h")
	wantExit(t, r, ExitOK)
	var out retryJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Requeued != 1 || !out.DryRun || requeued() != 1 {
		t.Errorf("retry --json --dry-run --older-than 24h: %v: %+v", err, out)
	}
	// By error group, as dead-letters --group-by error shows it.
	r = run(t, vars, "dead-letters", "--group-by", "error", "--json")
	wantExit(t, r, ExitOK)
	var groups []admin.DeadLetterGroup
	if err := json.Unmarshal([]byte(r.stdout), &groups); err != nil || len(groups) != 2 {
		t.Fatalf("dead-letters --group-by error --json: %v: %s", err, r.stdout)
	}
	var httpGroup string
	for _, g := range groups {
		if strings.HasPrefix(g.Error, "http") {
			httpGroup = g.Error
		}
	}
	r = run(t, vars, "retry", "--error-group", httpGroup, "--json")
	wantExit(t, r, ExitOK)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Requeued != 2 || out.DryRun || requeued() != 3 {
		t.Errorf("retry --error-group %q: %v: %s; %d re-queued", httpGroup, err, r.stdout, requeued())
	}
	// A second run with the unknown id still fails: a script can gate on it.
	r = run(t, vars, "retry", "--json", unknown.String())
	if r.code != ExitNotFound || !strings.Contains(r.stdout, unknown.String()) {
		t.Errorf("retry --json unknown: %s", r)
	}
}

func TestDeadLettersGroupBy(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	a := f.write("a.happened", 3)
	b := f.write("b.happened", 1)
	f.deadLetter(a, "timeout after 1500 ms")
	f.deadLetter(b, "timeout after 2500 ms")
	r := run(t, vars, "dead-letters", "--group-by", "error")
	wantExit(t, r, ExitOK)
	if !regexp.MustCompile(`(?m)^4\s+\S+\s+\S+\s+\S+\s+timeout after <n> ms$`).MatchString(r.stdout) {
		t.Errorf("--group-by error: one group of 4 expected:\n%s", r.stdout)
	}
	r = run(t, vars, "dead-letters", "--group-by", "type")
	wantExit(t, r, ExitOK)
	for _, re := range []string{`(?m)^a\.happened\s+3\s`, `(?m)^b\.happened\s+1\s`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("--group-by type lacks %s:\n%s", re, r.stdout)
		}
	}
	wantExit(t, run(t, vars, "dead-letters", "--group-by", "error", "--type", "a.happened"), ExitUsage)
}

func TestDiscard(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	a := f.write("a.happened", 3)
	b := f.write("b.happened", 2)
	pending := f.write("c.pending", 1)
	f.deadLetter(append(a, b...), "boom")
	// a[1] holds a later event of its aggregate back (ordered mode).
	held := f.write("a.later", 1)
	f.exec(`UPDATE outbox_events SET held_by = $1 WHERE id = $2`, a[1], held[0])

	r := run(t, vars, "dead-letters", "discard", "--type", "a.happened", "--dry-run")
	wantExit(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, "dry run: would discard 3 dead letter(s)") || f.count("true") != 7 {
		t.Errorf("discard --dry-run: %s", r)
	}
	// Ids: a pending event and an unknown id are left alone and named.
	unknown := uuid.New()
	r = run(t, vars, "dead-letters", "discard", a[1].String(), pending[0].String(), unknown.String())
	wantExit(t, r, ExitNotFound)
	if !strings.HasPrefix(r.stdout, "discarded 1 dead letter(s)") || !strings.Contains(r.stdout, "released 1 event(s)") ||
		!strings.Contains(r.stderr, pending[0].String()) || !strings.Contains(r.stderr, unknown.String()) {
		t.Errorf("discard ids: %s", r)
	}
	if f.count("id = $1", a[1]) != 0 || f.count("id = $1 AND held_by IS NULL", held[0]) != 1 || f.count("id = $1", pending[0]) != 1 {
		t.Error("discard ids: the dead letter is not deleted, its held event not released, or the pending event touched")
	}
	r = run(t, vars, "dead-letters", "discard", "--all")
	wantExit(t, r, ExitUsage)
	if !strings.Contains(r.stderr, "add --yes to confirm (nothing was deleted)") || f.count("dead_at IS NOT NULL") == 0 {
		t.Errorf("discard --all without --yes: %s", r)
	}
	r = run(t, vars, "dead-letters", "discard", "--all", "--yes", "--json")
	wantExit(t, r, ExitOK)
	var res discardJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Discarded != 4 || res.DryRun {
		t.Errorf("discard --all --json: %v: %s", err, r.stdout)
	}
	if n := f.count("dead_at IS NOT NULL"); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
	if n := f.count("true"); n != 2 {
		t.Errorf("%d rows left, want the pending and the released event", n)
	}
	r = run(t, vars, "help", "dead-letters", "discard")
	if r.code != ExitOK || !strings.Contains(r.stdout, "Usage: outbox dead-letters discard") {
		t.Errorf("help dead-letters discard: %s", r)
	}
}

func TestCleanupJSON(t *testing.T) {
	f := setup(t)
	f.write("old", 3)
	f.exec(`UPDATE outbox_events SET processed_at = now() - interval '2 hours'`)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	r := run(t, vars, "cleanup", "--retention", "1h", "--json")
	wantExit(t, r, ExitOK)
	var out cleanupJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Deleted != 3 || out.RetentionSeconds != 3600 {
		t.Errorf("cleanup --json: %v: %s", err, r.stdout)
	}
}

// The relay's JSON log: its start-up line names the version, durations are
// strings, and /metrics has outbox_build_info.
func TestRelayVersionAndLogDurations(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	r := startRelay(t, io.Discard, vars, "--broker", "stdout:", "--http-addr", "127.0.0.1:0", "--poll-interval", "250ms", "--log-format", "json")
	addr := r.httpAddr(t)
	line := r.stderr.waitFor(t, `\{[^\n]*"msg":"outbox relay started"[^\n]*\}`)[0]
	var started map[string]any
	if err := json.Unmarshal([]byte(line), &started); err != nil {
		t.Fatal(err)
	}
	if started["version"] != Version().Version || started["poll_interval"] != "250ms" {
		t.Errorf("start-up line: version %v (want %q), poll_interval %v (want \"250ms\")", started["version"], Version().Version, started["poll_interval"])
	}
	_, body := get(t, "http://"+addr+"/metrics")
	want := fmt.Sprintf(`outbox_build_info{goversion=%q,version=%q} 1`, Version().GoVersion, Version().Version)
	if !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if code := r.stop(t); code != ExitOK {
		t.Errorf("exit %d", code)
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// The relay waits for a database that is not there yet, not ready meanwhile,
// and starts when it comes; opted out or past --db-wait-timeout it exits 3,
// saying so in its JSON log.
func TestRelayWaitsForDatabase(t *testing.T) {
	f := setup(t)
	dbPort, httpPort := freePort(t), freePort(t)
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = "127.0.0.1:" + dbPort
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	vars := map[string]string{"DATABASE_URL": u.String(), "OUTBOX_SCHEMA": f.schema}

	// Opted out: exit 3 at once, the reason logged in JSON, then the
	// command's one-line exit reason.
	var stdout, stderr bytes.Buffer
	code := runWith(testCtx(t), &stdout, &stderr, vars, "relay", "--broker", "stdout:", "--log-format", "json", "--wait-for-db=false")
	if code != ExitDatabase {
		t.Fatalf("--wait-for-db=false: exit %d, want 3\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	for _, l := range lines[:len(lines)-1] {
		if !json.Valid([]byte(l)) {
			t.Errorf("--log-format json: a log line that is not JSON: %q", l)
		}
	}
	if !strings.Contains(stderr.String(), `"msg":"outbox relay cannot start"`) || !strings.Contains(stderr.String(), `"exit_code":3`) ||
		!strings.HasPrefix(lines[len(lines)-1], "outbox: database unreachable: ") {
		t.Errorf("the failure is not logged, or the exit reason is not the last line: %s", stderr.String())
	}

	// A bounded wait gives up with exit 3.
	stderr.Reset()
	start := time.Now()
	code = runWith(testCtx(t), &stdout, &stderr, vars, "relay", "--broker", "stdout:", "--log-format", "json",
		"--db-wait-timeout", "600ms", "--outage-base", "100ms")
	if code != ExitDatabase || !strings.Contains(stderr.String(), "gave up after --db-wait-timeout 600ms") ||
		!strings.Contains(stderr.String(), `"msg":"database unreachable: waiting for it (not ready)"`) {
		t.Errorf("--db-wait-timeout: exit %d after %s:\n%s", code, time.Since(start), stderr.String())
	}

	// Waiting: alive, not ready; then the database comes and the relay runs.
	r := startRelay(t, io.Discard, vars, "--broker", "stdout:", "--log-format", "json", "--outage-base", "50ms",
		"--outage-max", "200ms", "--http-addr", "127.0.0.1:"+httpPort)
	r.stderr.waitFor(t, `"msg":"database unreachable: waiting for it \(not ready\)"[^\n]*"retry_in":"50ms"`)
	if code, body := get(t, "http://127.0.0.1:"+httpPort+"/readyz"); code != 503 {
		t.Errorf("/readyz while waiting: %d %s", code, body)
	}
	if code, _ := get(t, "http://127.0.0.1:"+httpPort+"/healthz"); code != 200 {
		t.Errorf("/healthz while waiting: %d", code)
	}
	forward(t, "127.0.0.1:"+dbPort, target)
	r.stderr.waitFor(t, `"msg":"outbox relay started"`)
	ids := f.write("late", 2)
	eventually(t, "events published", func() bool { return f.count("processed_at IS NOT NULL AND id = ANY($1)", ids) == 2 })
	if code, body := get(t, "http://127.0.0.1:"+httpPort+"/readyz"); code != 200 {
		t.Errorf("/readyz once started: %d %s", code, body)
	}
	if code := r.stop(t); code != ExitOK {
		t.Errorf("exit %d:\n%s", code, r.stderr.String())
	}
}

// forward listens on addr and forwards every connection to target until the
// test ends.
func forward(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
			}()
		}
	}()
}

// Durations take days: 7d is 168h, and days combine with the other units.
func TestDayDurations(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"7d": 168 * time.Hour, "1.5d": 36 * time.Hour, "1d12h": 36 * time.Hour, "-2d": -48 * time.Hour,
		"90s": 90 * time.Second, "0": 0,
	} {
		var d time.Duration
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.DurationVar(&d, "d", 0, "")
		acceptDays(fs)
		if err := fs.Set("d", in); err != nil || d != want {
			t.Errorf("%q = %s, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"7days", "d", "1d-2h", "1w"} {
		var d time.Duration
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.DurationVar(&d, "d", 0, "")
		acceptDays(fs)
		if err := fs.Set("d", in); err == nil {
			t.Errorf("%q accepted as %s", in, d)
		}
	}
}

// cleanup and archive --dry-run count what they would take, change nothing,
// and take durations in days.
func TestCleanupArchiveDryRun(t *testing.T) {
	f := setup(t)
	f.write("order.created", 5)
	if _, err := f.pool.Exec(testCtx(t), `UPDATE outbox_events SET processed_at = now() - interval '10 days'
		WHERE id IN (SELECT id FROM outbox_events ORDER BY seq LIMIT 3)`); err != nil {
		t.Fatal(err)
	}
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	r := run(t, vars, "cleanup", "--retention", "7d", "--dry-run")
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "dry run: would delete 3 event(s) published more than 168h0m0s ago") {
		t.Errorf("cleanup --dry-run:\n%s", r)
	}
	r = run(t, vars, "archive", "--older-than", "11d", "--dry-run", "--json")
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, `"dry_run": true`) || strings.Contains(r.stdout, `"would_move"`) || !strings.Contains(r.stdout, `"moved": 0`) {
		t.Errorf("archive --dry-run --json, nothing that old:\n%s", r)
	}
	r = run(t, vars, "archive", "--older-than", "7d", "--dry-run", "--json")
	if !strings.Contains(r.stdout, `"would_move": 3`) {
		t.Errorf("archive --dry-run --json:\n%s", r)
	}
	if n := f.count("true"); n != 5 {
		t.Fatalf("%d events left after dry runs, want 5", n)
	}
	r = run(t, vars, "cleanup", "--retention", "7d")
	wantExit(t, r, ExitOK)
	if n := f.count("true"); n != 2 {
		t.Errorf("%d events left after cleanup, want 2", n)
	}
}

// A server that answers but refuses the database or the role says which and
// how to fix it; "unreachable" is kept for a server that does not answer.
func TestConnectRefusalsNamed(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Skipf("TEST_DATABASE_URL is not a URL: %v", err)
	}
	noDB := *u
	noDB.Path = "/" + testdb.NewSchemaName("nosuchdb")
	noRole := *u
	noRole.User = url.User(testdb.NewSchemaName("nosuchrole"))
	for _, tc := range []struct {
		dsn  string
		want []string
	}{
		{noDB.String(), []string{"outbox: database \"" + strings.TrimPrefix(noDB.Path, "/") + "\" does not exist on ", "createdb", "3D000"}},
		{noRole.String(), []string{"refused role \"" + noRole.User.Username() + "\"", "fix the user in --database-url", "28000"}},
	} {
		r := run(t, map[string]string{"DATABASE_URL": tc.dsn}, "status")
		wantExit(t, r, ExitDatabase)
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("status on %s: stderr lacks %q:\n%s", tc.dsn, w, r.stderr)
			}
		}
		if strings.Contains(r.stderr, "unreachable") {
			t.Errorf("status on %s: a server that answered is called unreachable:\n%s", tc.dsn, r.stderr)
		}
	}
}

// status, migrate and the relay agree on a table of the outbox's name that
// is something else: exit 4, the columns it lacks, and the fix (not "run
// outbox migrate", which would fail on it).
func TestForeignTable(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	if _, err := testdb.Pool(t, schema).Exec(testCtx(t), `CREATE TABLE outbox_events (id serial PRIMARY KEY, name text)`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"migrate"}, {"relay", "--broker", "stdout:"}} {
		r := run(t, dbEnv(), append(args, "--schema", schema)...)
		wantExit(t, r, ExitNotMigrated)
		if !strings.Contains(r.stderr, "exists but is not an outbox table") || !strings.Contains(r.stderr, "another table name (--table") ||
			strings.Contains(r.stderr, "run outbox migrate") {
			t.Errorf("outbox %s on a foreign table:\n%s", args[0], r)
		}
	}
}

// With --log-format json, a relay that cannot start because its table is
// not migrated logs it as JSON, with its exit code, before the one line.
func TestRelayNotMigratedLoggedAsJSON(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	r := run(t, dbEnv(), "relay", "--broker", "stdout:", "--schema", schema, "--log-format", "json")
	wantExit(t, r, ExitNotMigrated)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var entry struct {
		Msg      string `json:"msg"`
		Err      string `json:"err"`
		ExitCode int    `json:"exit_code"`
	}
	if len(lines) < 2 || json.Unmarshal([]byte(lines[len(lines)-2]), &entry) != nil || entry.Msg != "outbox relay cannot start" ||
		entry.ExitCode != ExitNotMigrated || !strings.Contains(entry.Err, "run outbox migrate") {
		t.Errorf("want a JSON log entry with exit_code 4 naming the fix before the last line:\n%s", r.stderr)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "outbox: table ") {
		t.Errorf("the last line is not the command's reason:\n%s", r.stderr)
	}
}
