package outboxcli

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/testdb"
)

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://bob:s3cret@db:5432/app":                    "postgres://bob:xxxxx@db:5432/app",
		"postgresql://bob:s3cret@db/app?sslmode=require":       "postgresql://bob:xxxxx@db/app?sslmode=require",
		"postgres://bob@db/app":                                "postgres://bob@db/app",
		"postgres://db/app?password=s3cret&sslmode=disable":    "postgres://db/app?password=xxxxx&sslmode=disable",
		"host=db user=bob password=s3cret dbname=app":          "host=db user=bob password=xxxxx dbname=app",
		"host=db password='s3 cret' dbname=app":                "host=db password=xxxxx dbname=app",
		"host=db PASSWORD = s3cret":                            "host=db PASSWORD = xxxxx",
		`parse "postgres://bob:s3cret@db:x/app": invalid port`: `parse "postgres://bob:xxxxx@db:x/app": invalid port`,
		"nats://user:pw@127.0.0.1:4222, nats://u2:pw2@h:1":     "nats://user:xxxxx@127.0.0.1:4222, nats://u2:xxxxx@h:1",
		// A JSON log line with a URL and, later, an unrelated "@".
		`{"broker":"nats://127.0.0.1:4222","to":"a@b"}`: `{"broker":"nats://127.0.0.1:4222","to":"a@b"}`,
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

func TestRedactorMasksKnownPasswords(t *testing.T) {
	t.Parallel()
	r := &redactor{}
	r.addDSN("postgres://bob:p%40ss%2Fw0rd@db:notaport/app") // malformed on purpose
	r.addDSN("host=db password='quoted secret'")
	r.addDSN("nats://u:ab@h") // too short to mask in free text
	var buf bytes.Buffer
	w := &redactWriter{w: &buf, r: r}
	msg := "decoded p@ss/w0rd, raw p%40ss%2Fw0rd, quoted secret, ab stays"
	if n, err := w.Write([]byte(msg)); err != nil || n != len(msg) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if got, want := buf.String(), "decoded xxxxx, raw xxxxx, xxxxx, ab stays"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func FuzzRedactDSN(f *testing.F) {
	for _, s := range []string{"postgres://u:pw@h/db", "host=h password=pw", "nats://a:b@c", "x://:@"} {
		f.Add(s, "Secret123")
	}
	f.Fuzz(func(t *testing.T, prefix, pw string) {
		if len(pw) < minSecret || strings.ContainsAny(pw, "@ \t\n\r'\"/&") || strings.Contains("xxxxx", pw) {
			return
		}
		dsn := "postgres://user:" + pw + "@host:5432/db"
		r := &redactor{}
		r.addDSN(dsn)
		if got := r.String(prefix + dsn + prefix); strings.Contains(got, pw) && !strings.Contains(prefix, pw) {
			t.Errorf("password %q survives in %q", pw, got)
		}
	})
}

// A canary password in the DSN and in the broker URL never appears in any
// output: stdout, stderr, logs, /metrics, /readyz, errors of every kind.
func TestCanaryPasswordNeverPrinted(t *testing.T) {
	f := setup(t)
	const canary = "Canary-Pw-5738"
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, has := u.User.Password(); has {
		// The server checks passwords: log in as a role of the test's own
		// whose password is the canary.
		u.User = url.UserPassword(canaryRole(t, f, canary), canary)
	} else {
		u.User = url.UserPassword(u.User.Username(), canary) // trust authentication ignores it
	}
	dsn := u.String()
	var all strings.Builder
	collect := func(r result) result {
		all.WriteString(r.stdout)
		all.WriteString(r.stderr)
		return r
	}
	vars := map[string]string{"DATABASE_URL": dsn, "OUTBOX_SCHEMA": f.schema}
	f.write("order.created", 3)

	for _, args := range [][]string{
		{"migrate"}, {"migrate", "status"}, {"status"}, {"status", "--json"}, {"dead-letters", "--json"},
		{"retry", "--all", "--dry-run"}, {"cleanup", "--retention", "1h"},
	} {
		wantExit(t, collect(run(t, vars, args...)), ExitOK)
	}

	// A relay publishing to stdout, with debug logs and its endpoints.
	var out syncBuffer
	r := startRelay(t, &out, vars, "--broker", "stdout:", "--log-level", "debug", "--http-addr", "127.0.0.1:0")
	addr := r.httpAddr(t)
	eventually(t, "every event published", func() bool { return f.count("processed_at IS NULL") == 0 })
	for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
		_, body := get(t, "http://"+addr+path)
		all.WriteString(body)
	}
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("relay exit %d:\n%s", code, r.stderr)
	}
	all.WriteString(out.String() + r.stderr.String())

	// A relay whose broker, with the canary as its password, is unreachable.
	f.write("order.created", 1)
	r = startRelay(t, &out, vars, "--broker", "nats://outbox:"+canary+"@127.0.0.1:1", "--log-level", "debug",
		"--http-addr", "127.0.0.1:0", "--outage-base", "10ms", "--outage-max", "50ms")
	addr = r.httpAddr(t)
	r.stderr.waitFor(t, "broker unavailable")
	_, body := get(t, "http://"+addr+"/readyz")
	all.WriteString(body)
	r.stop(t)
	all.WriteString(r.stderr.String())

	// Failures: unreachable, malformed URL and key=value DSNs, a bad flag.
	bad := func(dsn string, code int, args ...string) {
		t.Helper()
		res := collect(run(t, map[string]string{"DATABASE_URL": dsn}, args...))
		wantExit(t, res, code)
	}
	bad("postgres://postgres:"+canary+"@127.0.0.1:1/test", ExitDatabase, "status")
	bad("postgres://postgres:"+canary+"@127.0.0.1:notaport/test", ExitUsage, "status")
	bad("postgres://postgres:"+canary+"@127.0.0.1:notaport/test", ExitUsage, "relay", "--broker", "stdout:")
	bad("postgres://postgres:"+url.PathEscape(canary+"/x")+"@127.0.0.1:notaport/test", ExitUsage, "status")
	bad("host=127.0.0.1 port=notaport password="+canary, ExitUsage, "status")
	bad("host=127.0.0.1 port=1 password='"+canary+"'", ExitDatabase, "status")
	bad(dsn, ExitUsage, "relay", "--broker", "kafka2://u:"+canary+"@h:9092")
	bad(dsn, ExitUsage, "relay", "--broker", "nats://u:"+canary+"@h:notaport/%zz")

	if all.Len() == 0 {
		t.Fatal("nothing collected")
	}
	for _, secret := range []string{canary, url.PathEscape(canary + "/x")} {
		if i := strings.Index(all.String(), secret); i >= 0 {
			s := all.String()
			t.Errorf("the password %q appears in the output: ...%s...", secret, s[max(0, i-200):min(len(s), i+100)])
		}
	}
}

// canaryRole creates a login role with password pw, able to do all the
// test's commands on f's schema (a superuser: migrate and the relay need the
// table's owner rights), dropped when the test ends, and returns its name.
func canaryRole(t *testing.T, f *fixture, pw string) string {
	t.Helper()
	var super bool
	if err := f.pool.QueryRow(testCtx(t), `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if !super {
		t.Fatal("TEST_DATABASE_URL has a password and its role is not a superuser: the test cannot create the canary's role")
	}
	role := "canary_" + strings.ToLower(f.schema)
	q := pgx.Identifier{role}.Sanitize()
	f.exec(`CREATE ROLE ` + q + ` LOGIN SUPERUSER PASSWORD '` + strings.ReplaceAll(pw, "'", "''") + `'`)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = f.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		for _, stmt := range []string{`REASSIGN OWNED BY ` + q + ` TO current_user`, `DROP OWNED BY ` + q, `DROP ROLE ` + q} {
			if _, err := f.pool.Exec(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	return role
}

// A broker URL is shown with its password masked and its topic template's
// braces as written, not percent-encoded.
func TestDisplayURL(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("https://hook:s3cret@hooks.example.com/in/{aggregate_type}/{event_type}?type={event_type}&x=%2F")
	if err != nil {
		t.Fatal(err)
	}
	want := "https://hook:xxxxx@hooks.example.com/in/{aggregate_type}/{event_type}?type={event_type}&x=%2F"
	if got := displayURL(u); got != want {
		t.Errorf("displayURL = %q, want %q", got, want)
	}
}
