package reliability

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeEvents commits n events to schema.table through outbox.Writer and
// records them.
func (e *env) writeEvents(schema, table string, n int) {
	e.t.Helper()
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema, Table: table})
	if err != nil {
		e.t.Fatal(err)
	}
	evs := make([]outbox.Event, n)
	rec := make([]Written, n)
	base := len(e.hist.Committed())
	for i := range evs {
		id := uuid.Must(uuid.NewV7())
		evs[i] = outbox.Event{ID: id, AggregateType: "acct", AggregateID: "s", EventType: "ev", Payload: fmt.Appendf(nil, `{"n":%d,"agg":"s"}`, base+i)}
		rec[i] = Written{ID: id.String(), Aggregate: "s", N: base + i}
	}
	if err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := w.Write(context.Background(), tx, evs...)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	e.hist.Record(Committed, rec...)
}

// TestSecurityHostileIdentifiers: schema and table names built to break
// string-spliced SQL (quotes, semicolons, comments, keywords, non-ASCII) go
// through migrate, the write API, the relay (with LISTEN) and status; the
// events flow and a canary table survives.
func TestSecurityHostileIdentifiers(t *testing.T) {
	t.Parallel()
	sfx := randHex(3)
	names := []struct{ schema, table string }{
		{`rel"; DROP TABLE canary; --` + sfx, `ev'ents"; DELETE FROM canary; --`},
		{`Schéma Ünï 空 ` + sfx, `Événements "quotés"`},
		{`select` + sfx, `order`},
	}
	for i, n := range names {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{})
			canary := pgx.Identifier{e.schema, "canary"}.Sanitize()
			if _, err := e.pool.Exec(context.Background(), `CREATE TABLE `+canary+` (x int); INSERT INTO `+canary+` VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { testdb.Drop(t, n.schema) })
			env := map[string]string{"DATABASE_URL": relayDSN(t, "", "hostile", "")}
			code, out, errOut := runCLI(t, env, "migrate", "--schema", n.schema, "--table", n.table)
			if code != 0 {
				t.Fatalf("migrate: exit %d: %s%s", code, out, errOut)
			}
			e.table = pgx.Identifier{n.schema, n.table}.Sanitize()
			e.writeEvents(n.schema, n.table, 50)
			r := e.newRelay("r", relayOpts{workers: 1, listen: true, extra: []string{"--table", n.table}})
			r.opts.extra = append(r.opts.extra, "--schema", n.schema) // the last --schema wins
			p := r.start()
			_, ok := e.waitDrained(time.Minute)
			if !ok {
				t.Fatalf("not drained: %s", tail(p.stderr.String(), 10))
			}
			listening := e.waitListening(r.name, 10*time.Second)
			code, status, errOut := runCLI(t, env, "status", "--schema", n.schema, "--table", n.table, "--json")
			r.stopGracefully()
			var canaryRows int
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+canary).Scan(&canaryRows); err != nil {
				t.Fatalf("canary table: %v", err)
			}
			ok = code == 0 && canaryRows == 1 && listening && strings.Contains(status, `"pending": 0`)
			if !ok {
				t.Errorf("status exit %d (%s%s), canary rows %d, listening %v", code, status, errOut, canaryRows, listening)
			}
			res := Check(e.hist, e.readStream(e.prefix))
			ok = ok && res.OK(false) && res.Delivered == 50
			report.check(Assertion{Area: "security", Name: fmt.Sprintf("hostile identifiers: schema %q, table %q", n.schema, n.table),
				Expectation: "migrate, write, relay (with LISTEN), status all work; nothing else touched",
				Observed:    fmt.Sprintf("50 events delivered (lost %d), LISTEN on the derived channel: %v, status exit %d, canary table intact: %v", len(res.Lost), listening, code, canaryRows == 1),
				Passed:      ok})
		})
	}
}

// TestSecurityCanaryPassword: a canary password in the database URL and in
// the broker URL must never appear in the relay's logs (debug level), its
// errors, /metrics, /readyz, `outbox status`, exit messages, or the
// goroutine dump of SIGQUIT.
func TestSecurityCanaryPassword(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	dbCanary := "Db-C4n4ry:" + randHex(4) + "/?#@%"
	brokerCanary := "Nats-C4n4ry" + randHex(4)
	kvCanary := "Kv-C4n4ry" + randHex(4)
	canaries := []string{dbCanary, url.QueryEscape(dbCanary), url.PathEscape(dbCanary), url.UserPassword("x", dbCanary).String(), brokerCanary, kvCanary}

	dsnWith := func(addr string) string {
		u, _ := url.Parse(relayDSN(t, addr, e.schema+"-canary", ""))
		u.User = url.UserPassword(u.User.Username(), dbCanary)
		return u.String()
	}
	r := e.newRelay("r", relayOpts{workers: 1, httpAddr: true, extra: []string{"--log-level", "debug"}})
	r.opts.dsn = dsnWith(r.pg.Addr())
	r.opts.broker = "nats://relay:" + brokerCanary + "@" + r.nats.Addr()
	p := r.start()
	addr := r.httpAddr(p)
	e.writeEvents(e.schema, "outbox_events", 20)
	if _, ok := e.waitDrained(time.Minute); !ok {
		t.Fatal("not drained")
	}
	var outputs []struct{ what, text string }
	add := func(what, text string) { outputs = append(outputs, struct{ what, text string }{what, text}) }
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		_, body := httpGet(addr, path)
		add("GET "+path, body)
	}
	// Errors: the database and the broker go away, the relay logs why.
	r.pg.Cut()
	r.nats.Cut()
	e.writeEvents(e.schema, "outbox_events", 5)
	time.Sleep(3 * time.Second)
	for _, path := range []string{"/metrics", "/readyz"} {
		_, body := httpGet(addr, path)
		add("GET "+path+" during an outage", body)
	}
	r.pg.Restore()
	r.nats.Restore()
	if _, ok := e.waitDrained(time.Minute); !ok {
		t.Error("not drained after the outage")
	}
	// The goroutine dump a stuck process gives on SIGQUIT.
	p.signal(syscall.SIGQUIT)
	p.wait(20 * time.Second)
	add("relay logs (debug) and SIGQUIT goroutine dump", p.stderr.String())
	if !strings.Contains(p.stderr.String(), "goroutine ") {
		t.Error("SIGQUIT produced no goroutine dump")
	}
	if !strings.Contains(p.stderr.String(), "batch failed") {
		t.Error("the outage produced no error log to check")
	}

	// Operator commands, and start-up failures, with the canary in the DSN.
	direct := dsnWith("")
	cmds := []struct {
		what string
		env  map[string]string
		args []string
	}{
		{"outbox status", map[string]string{"DATABASE_URL": direct}, []string{"status", "--schema", e.schema}},
		{"outbox status --json", map[string]string{"DATABASE_URL": direct}, []string{"status", "--schema", e.schema, "--json"}},
		{"outbox dead-letters", map[string]string{"DATABASE_URL": direct}, []string{"dead-letters", "--schema", e.schema}},
		{"outbox migrate status", map[string]string{"DATABASE_URL": direct}, []string{"migrate", "status", "--schema", e.schema}},
		{"outbox status, DSN as a flag", nil, []string{"status", "--schema", e.schema, "--database-url", direct}},
		{"outbox status, key=value DSN", map[string]string{"DATABASE_URL": fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=test sslmode=disable password=%s", strings.Split(pgAddr(t), ":")[1], kvCanary)}, []string{"status", "--schema", e.schema}},
		{"outbox relay, database unreachable (exit 3)", map[string]string{"DATABASE_URL": strings.Replace(direct, pgAddr(t), "127.0.0.1:1", 1), "OUTBOX_WAIT_FOR_DB": "false"}, []string{"relay", "--broker", "nats://u:" + brokerCanary + "@127.0.0.1:1"}},
		{"outbox relay, key=value DSN unreachable", map[string]string{"DATABASE_URL": "host=127.0.0.1 port=1 user=postgres password=" + kvCanary + " connect_timeout=2", "OUTBOX_WAIT_FOR_DB": "false"}, []string{"relay", "--broker", "nats://127.0.0.1:1"}},
		{"outbox relay, malformed DSN (exit 2)", map[string]string{"DATABASE_URL": "postgres://postgres:" + dbCanary + "@[::1:5432/test"}, []string{"relay", "--broker", "nats://127.0.0.1:1"}},
		{"outbox relay, not migrated (exit 4)", map[string]string{"DATABASE_URL": direct}, []string{"relay", "--schema", "nope_" + randHex(3), "--broker", "nats://u:" + brokerCanary + "@127.0.0.1:1"}},
		{"outbox relay, unknown broker scheme (exit 2)", map[string]string{"DATABASE_URL": direct}, []string{"relay", "--schema", e.schema, "--broker", "bogus://u:" + brokerCanary + "@127.0.0.1:1"}},
		{"outbox relay, bad broker URL (exit 2)", map[string]string{"DATABASE_URL": direct}, []string{"relay", "--schema", e.schema, "--broker", "nats://u:" + brokerCanary + "@[::1"}},
	}
	for _, c := range cmds {
		start := time.Now()
		code, out, errOut := runCLI(t, c.env, c.args...)
		add(fmt.Sprintf("%s (exit %d)", c.what, code), out+errOut)
		t.Logf("%s: exit %d in %s", c.what, code, time.Since(start).Round(time.Millisecond))
	}
	leaks := 0
	for _, o := range outputs {
		for _, c := range canaries {
			if strings.Contains(o.text, c) {
				leaks++
				i := strings.Index(o.text, c)
				t.Errorf("%s: contains the password %q: ...%s...", o.what, c, o.text[max(0, i-80):min(len(o.text), i+len(c)+40)])
			}
		}
	}
	report.check(Assertion{Area: "security", Name: "canary password in the DSN and the broker URL",
		Expectation: "never printed: logs (debug), errors, /metrics, /healthz, /readyz (also during an outage), status, dead-letters, migrate status, exit messages, SIGQUIT dump",
		Observed:    fmt.Sprintf("%d outputs searched for %d spellings of the passwords (raw, URL-escaped): %d leaks", len(outputs), len(canaries), leaks),
		Passed:      leaks == 0})

	// Not output, but worth knowing: a DSN given as a flag is visible to
	// every local user in the process list.
	r2 := e.newRelay("flag", relayOpts{workers: 1})
	r2.opts.env = map[string]string{"DATABASE_URL": ""}
	r2.opts.extra = []string{"--database-url", dsnWith(r2.pg.Addr())}
	p2 := r2.start()
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p2.pid()))
	r2.stopGracefully()
	inArgv := strings.Contains(string(cmdline), "Db-C4n4ry")
	report.check(Assertion{Area: "security", Name: "password given with --database-url",
		Expectation: "documented: the environment (DATABASE_URL) or a config file keeps it out of the process list",
		Observed:    fmt.Sprintf("visible in /proc/<pid>/cmdline (ps): %v; not in any output", inArgv), Passed: true})
}

// TestSecurityLeastPrivilege: the relay process runs as a role holding only
// the GRANTs docs/OPERATING.md recommends (the tighter, per-column block),
// the writers as the application's role, and the relay is SIGKILLed a few
// times on the way: nothing is lost, no privilege is missing.
func TestSecurityLeastPrivilege(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	doc, err := os.ReadFile("../docs/OPERATING.md")
	if err != nil {
		missing(t, "docs/OPERATING.md: %v", err)
	}
	blocks := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)<!-- grants: (\\w+) -->\\s*```sql\\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		blocks[m[1]] = m[2]
	}
	grants, which := blocks["columns"], "columns"
	if grants == "" {
		grants, which = blocks["table"], "table"
	}
	if grants == "" {
		missing(t, "docs/OPERATING.md documents no <!-- grants: ... --> block")
	}
	sfx := randHex(4)
	appRole, relayRole := "rel_app_"+sfx, "rel_relay_"+sfx
	for _, role := range []string{appRole, relayRole} {
		q := pgx.Identifier{role}.Sanitize()
		if _, err := e.pool.Exec(context.Background(), `CREATE ROLE `+q+` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = e.pool.Exec(context.Background(), `DROP OWNED BY `+q)
			_, _ = e.pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+q)
		})
	}
	sql := regexp.MustCompile(`\bapp\b`).ReplaceAllString(grants, pgx.Identifier{e.schema}.Sanitize())
	sql = regexp.MustCompile(`\boutbox_app\b`).ReplaceAllString(sql, pgx.Identifier{appRole}.Sanitize())
	sql = regexp.MustCompile(`\boutbox_relay\b`).ReplaceAllString(sql, pgx.Identifier{relayRole}.Sanitize())
	if _, err := e.pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("the documented GRANTs: %v\n%s", err, sql)
	}

	appCfg, err := pgxpool.ParseConfig(relayDSN(t, "", e.schema+"-app", appRole))
	if err != nil {
		t.Fatal(err)
	}
	appPool, err := pgxpool.NewWithConfig(context.Background(), appCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer appPool.Close()
	w := e.startWriters(&workload{pool: appPool, writers: 2, aggregates: 10, pause: 30 * time.Millisecond, rollbackPct: 10})
	r := e.newRelay("lp", relayOpts{workers: 2, batch: 20, ordered: true, listen: true, extra: []string{"--retention", "1h", "--cleanup-interval", "1s"}})
	r.opts.dsn = relayDSN(t, r.pg.Addr(), r.name, relayRole)
	r.start()
	kills := 0
	for range 5 {
		time.Sleep(time.Duration(500+mathrand.IntN(700)) * time.Millisecond)
		r.restart()
		kills++
	}
	time.Sleep(time.Second)
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(time.Minute); !ok {
		t.Errorf("not drained: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	statusCode, _, statusErr := runCLI(t, map[string]string{"DATABASE_URL": relayDSN(t, "", "lp-status", relayRole)}, "status", "--schema", e.schema)
	r.stopGracefully()
	logs := r.logs()
	denied := logLines(logs, "permission denied")
	var superuser, canCreate bool
	if err := e.pool.QueryRow(context.Background(), `SELECT rolsuper, has_schema_privilege($1, $2, 'CREATE') FROM pg_roles WHERE rolname = $1`, relayRole, e.schema).Scan(&superuser, &canCreate); err != nil {
		t.Fatal(err)
	}
	passed := len(denied) == 0 && statusCode == 0 && !superuser && !canCreate
	if !passed {
		t.Errorf("permission errors: %v; status exit %d %s; superuser %v, CREATE %v", denied, statusCode, statusErr, superuser, canCreate)
	}
	report.check(Assertion{Area: "security", Name: "relay process as a least-privilege role",
		Expectation: "the GRANTs of docs/OPERATING.md are enough for outbox relay (ordered, --listen, --retention) and outbox status; no superuser, no CREATE",
		Observed:    fmt.Sprintf("%q GRANT block; %d relay processes (%d SIGKILLs); permission errors in their logs: %d; status exit %d", which, r.starts, kills, len(denied), statusCode),
		Passed:      passed})
	e.finish(Row{Key: "10", Scenario: "Relay as a least-privilege role (docs/OPERATING.md GRANTs), ordered, with LISTEN and retention",
		Fault: "SIGKILL of the relay at random times", Ordered: true, Runs: kills, Resent: e.wire.resent(), Drain: drain,
		Details: []string{fmt.Sprintf("writers as the application role (INSERT only), relay as the relay role; GRANTs: the %q block of docs/OPERATING.md", which)}})
}

// tlsFiles writes a CA and a server certificate for 127.0.0.1 into dir.
func tlsFiles(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reliability test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", keyDER)
}

// TestSecurityTLS: TLS to the broker and to PostgreSQL is verified when
// configured, and nothing in the CLI turns verification off.
func TestSecurityTLS(t *testing.T) {
	t.Parallel()
	if natsServerBin == "" {
		missing(t, "needs the nats-server binary for a TLS server (NATS_SERVER_BIN, PATH or /usr/sbin/nats-server)")
	}
	slot(t)
	dir := t.TempDir()
	caFile, certFile, keyFile := tlsFiles(t, dir)
	e := newEnv(t, envOpts{natsCA: caFile, nats: natsOpts{extraConf: fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n}\n", certFile, keyFile)}})

	// 1. The broker's certificate is not trusted: nothing is published.
	untrusted := e.newRelay("untrusted", relayOpts{workers: 1, httpAddr: true})
	untrusted.opts.broker = "tls://" + untrusted.nats.Addr()
	e.writeEvents(e.schema, "outbox_events", 10)
	p := untrusted.start()
	addr := untrusted.httpAddr(p)
	time.Sleep(4 * time.Second)
	pendingUntrusted := e.pending()
	readyCode, readyBody := httpGet(addr, "/readyz")
	logs := p.stderr.String()
	tlsErrLogged := strings.Contains(logs, "x509") || strings.Contains(logs, "certificate")
	untrusted.stopGracefully()

	// 2. The CA is trusted (SSL_CERT_FILE, Go's standard way): published.
	trusted := e.newRelay("trusted", relayOpts{workers: 1})
	trusted.opts.broker = "tls://" + trusted.nats.Addr()
	trusted.opts.env = map[string]string{"SSL_CERT_FILE": caFile}
	trusted.start()
	_, drained := e.waitDrained(time.Minute)
	trusted.stopGracefully()

	// 3. No switch turns verification off.
	_, help, helpErr := runCLI(t, nil, "relay", "--help")
	insecure := regexp.MustCompile(`(?i)insecure|skip.?verify|no.?verify`).FindString(help + helpErr)

	ok := pendingUntrusted == 10 && readyCode == http.StatusServiceUnavailable && drained && insecure == ""
	if !ok {
		t.Errorf("untrusted: %d pending (want 10), /readyz %d %q; trusted: drained %v; insecure flag %q", pendingUntrusted, readyCode, readyBody, drained, insecure)
	}
	report.check(Assertion{Area: "security", Name: "TLS to NATS (tls://) is verified",
		Expectation: "an untrusted server certificate stops publishing; trusting its CA (SSL_CERT_FILE) works; no flag disables verification",
		Observed: fmt.Sprintf("untrusted: %d of 10 events kept, /readyz %d %q, certificate error in the relay's log: %v; trusted CA: drained %v; insecure flag in --help: %v",
			pendingUntrusted, readyCode, strings.TrimSpace(readyBody), tlsErrLogged, drained, insecure != ""),
		Passed: ok})
	tlsLine := ""
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "x509") || strings.Contains(l, "certificate") {
			tlsLine = logField(l, "err")
			break
		}
	}
	regression(t, "outbox relay did not log why a NATS connection failed (TLS verification)", "ab20a39",
		"the certificate error is logged, so the operator knows why nothing is published",
		tlsErrLogged, fmt.Sprintf("relay log against an untrusted certificate: %q", tlsLine))

	// 4. PostgreSQL (ssl=on with a self-signed certificate here).
	var sslOn string
	if err := e.pool.QueryRow(context.Background(), `SHOW ssl`).Scan(&sslOn); err != nil || sslOn != "on" {
		t.Logf("PostgreSQL has ssl=%s: skipping the PostgreSQL TLS checks", sslOn)
		return
	}
	base, _ := url.Parse(relayDSN(t, "", "tls-check", ""))
	try := func(mode string, extra map[string]string) (int, string) {
		u := *base
		qv := u.Query()
		qv.Set("sslmode", mode)
		for k, v := range extra {
			qv.Set(k, v)
		}
		u.RawQuery = qv.Encode()
		code, _, errOut := runCLI(t, map[string]string{"DATABASE_URL": u.String()}, "status", "--schema", e.schema)
		return code, strings.TrimSpace(tail(errOut, 1))
	}
	// verify-ca against a CA that did not sign the server's certificate (the
	// machine's snakeoil certificate may sit in the system store, which Go
	// reads from /etc/ssl/certs), and verify-full with the system store.
	caCode, caErr := try("verify-ca", map[string]string{"sslrootcert": caFile})
	vfCode, vfErr := try("verify-full", nil)
	reqCode, _ := try("require", nil)
	reqRootCode, _ := try("require", map[string]string{"sslrootcert": caFile})
	okPG := vfCode == 3 && caCode == 3
	report.check(Assertion{Area: "security", Name: "TLS to PostgreSQL is verified with sslmode=verify-ca/verify-full",
		Expectation: "a server certificate the given CA did not sign, or whose name does not match, is refused",
		Observed:    fmt.Sprintf("verify-ca with another CA: exit %d (%s); verify-full: exit %d (%s)", caCode, caErr, vfCode, vfErr),
		Passed:      okPG})
	if !okPG {
		t.Errorf("verify-full exit %d %s; verify-ca exit %d %s", vfCode, vfErr, caCode, caErr)
	}
	report.check(Assertion{Area: "security", Name: "sslmode=require / prefer (libpq semantics)",
		Expectation: "libpq's meaning, to be documented: require encrypts without checking the server unless sslrootcert is given; only verify-full checks the name",
		Observed: fmt.Sprintf("sslmode=require without sslrootcert: exit %d against the server verify-full refuses (%s); require with the foreign sslrootcert: exit %d (verified like verify-ca); no sslmode means prefer: unverified TLS with a plaintext fallback",
			reqCode, map[bool]string{true: "connected without verification", false: "refused"}[reqCode == 0], reqRootCode),
		Passed: true})
}

// TestSecurityHTTPEndpoints: the relay's HTTP endpoints are off by default,
// read-only when on: every method but GET/HEAD is refused, and nothing else
// (pprof, admin) is served.
func TestSecurityHTTPEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	off := e.newRelay("off", relayOpts{workers: 1})
	p := off.start()
	off.waitStarted(p)
	listeners := listeningSockets(t, p.pid())
	off.stopGracefully()

	on := e.newRelay("on", relayOpts{workers: 1, httpAddr: true})
	p = on.start()
	addr := on.httpAddr(p)
	var bad []string
	checks := 0
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			req, _ := http.NewRequest(m, "http://"+addr+path, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			checks++
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s %s: %v", m, path, err))
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				bad = append(bad, fmt.Sprintf("%s %s: %d", m, path, resp.StatusCode))
			}
		}
	}
	for _, path := range []string{"/", "/debug/pprof/", "/debug/vars", "/admin", "/retry", "/metrics/../admin"} {
		checks++
		if code, _ := httpGet(addr, path); code != http.StatusNotFound {
			bad = append(bad, fmt.Sprintf("GET %s: %d", path, code))
		}
	}
	on.stopGracefully()
	ok := len(listeners) == 0 && len(bad) == 0
	if !ok {
		t.Errorf("listening sockets without --http-addr: %v; unexpected answers: %v", listeners, bad)
	}
	report.check(Assertion{Area: "security", Name: "HTTP endpoints",
		Expectation: "off by default; with --http-addr only GET /metrics, /healthz, /readyz: other methods 405, other paths 404",
		Observed:    fmt.Sprintf("without --http-addr the relay listens on %d sockets; %d method/path probes, unexpected answers: %v", len(listeners), checks, bad),
		Passed:      ok})
}

// waitStarted waits for the relay's "started" log line.
func (r *relay) waitStarted(p *proc) {
	r.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(p.stderr.String(), `"msg":"outbox relay started"`) {
			return
		}
	}
	r.t.Fatalf("relay %s did not start: %s", r.name, tail(p.stderr.String(), 20))
}

// listeningSockets returns the TCP sockets pid listens on.
func listeningSockets(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" && inodes[fs[9]] { // 0A: LISTEN
				out = append(out, fs[1])
			}
		}
	}
	return out
}
