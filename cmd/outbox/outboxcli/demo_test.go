package outboxcli

import (
	"context"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
)

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	err := testdb.Pool(t, "").QueryRow(testCtx(t), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, name).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// The demo, small, with its embedded NATS server stopped and restarted, its
// relay stopped and restarted and every event delivered twice: every order
// shipped once, nothing dead-lettered, and the schema dropped at the end.
func TestDemo(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("demo")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	// A canary password (trust authentication ignores it) must not be shown;
	// when the test database has a real password, that is the canary.
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	canary, has := u.User.Password()
	if !has {
		canary = "Demo-Canary-41"
		u.User = url.UserPassword(u.User.Username(), canary)
	}
	r := run(t, map[string]string{"DATABASE_URL": u.String()}, "demo", "--schema", schema,
		"--orders", "200", "--rate", "400", "--outage", "1s", "--relay-down", "300ms")
	wantExit(t, r, ExitOK)
	for _, re := range []string{
		`(?m)^progress  written: orders committed with their event; published: events the broker confirmed;$`,
		`(?m)^ +lag: how long the oldest of them has waited$`,
		`(?m)^>>> failure: stopping the NATS server for 1s`,
		`(?m)^>>> NATS is back`,
		`(?m)^>>> failure: relay stopped mid-run`,
		`(?m)^>>> relay restarted`,
		`(?m)^>>> failure: 190 events marked unpublished`,
		`(?m)^\[\s*\d+\.\ds\] orders \d+/200  written \d+  published \d+  shipped \d+  pending \d+  lag \S+`,
		`(?m)^  orders committed\s+190\s`,
		`(?m)^  orders rolled back\s+10\s+shipped: 0 `,
		`(?m)^  deliveries\s+\d+\s+to the shipping service; duplicates skipped by its inbox: \d+$`,
		`(?m)^  shipments\s+190\s+orders shipped exactly once: 190, twice or more: 0$`,
		`(?m)^  dead letters\s+0$`,
		`(?m)^  lost\s+0\s`,
		`(?m)^result: lost 0, shipped twice 0, duplicates skipped \d+, dead letters 0, unexpected shipments 0: OK`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("demo output does not match %s", re)
		}
	}
	if strings.Contains(r.stdout+r.stderr, canary) {
		t.Error("the demo printed the database password")
	}
	if strings.Contains(r.stdout, "\r") {
		t.Error("progress redrawn with \\r on a non-terminal")
	}
	if t.Failed() {
		t.Logf("output:\n%s", r)
	}
	if schemaExists(t, schema) {
		t.Errorf("schema %s left behind", schema)
	}
}

// With --broker the demo uses that NATS server (and cannot stop it): only
// the relay restart is injected. --keep keeps the schema.
func TestDemoExternalBrokerKeep(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("demo")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	js, err := jetstream.New(testnats.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	stream := strings.ToUpper(schema) // the demo's stream, kept on the shared server
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
	})
	r := run(t, dbEnv(), "demo", "--schema", schema, "--broker", testnats.URL(),
		"--orders", "100", "--rate", "500", "--relay-down", "100ms", "--keep")
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "result: lost 0,") || strings.Contains(r.stdout, "stopping the NATS server") ||
		!strings.Contains(r.stdout, "kept schema "+schema) {
		t.Errorf("demo output:\n%s", r)
	}
	if !schemaExists(t, schema) {
		t.Errorf("--keep: schema %s dropped", schema)
	}
	if _, err := js.Stream(testCtx(t), stream); err != nil {
		t.Errorf("--keep: stream %s not kept: %v", stream, err)
	}
}

// The demo refuses a schema that exists: it drops its schema at the end.
func TestDemoRefusesExistingSchema(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	r := run(t, dbEnv(), "demo", "--schema", schema, "--orders", "10")
	wantExit(t, r, ExitUsage)
	if !strings.Contains(r.stderr, `--schema: "`+schema+`" already exists`) {
		t.Errorf("stderr: %s", r.stderr)
	}
	if !schemaExists(t, schema) {
		t.Error("the demo dropped a schema it did not create")
	}
}

// The daemon's build (-tags noembeddednats) leaves nats-server out, and the
// default build (go run ./cmd/outbox demo on a fresh machine) keeps it.
func TestNoEmbeddedNATSBuildLeavesServerOut(t *testing.T) {
	t.Parallel()
	deps := func(tags ...string) string {
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command("go", append(args, "github.com/pgoutbox/outbox/cmd/outbox")...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	const server = "github.com/nats-io/nats-server/v2/server\n"
	if !strings.Contains(deps(), server) {
		t.Error("the default build does not embed nats-server: outbox demo needs it on a machine without NATS")
	}
	if strings.Contains(deps("-tags", "noembeddednats"), server) {
		t.Error("the noembeddednats build still links nats-server")
	}
}
