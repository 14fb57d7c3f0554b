package outboxcli

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// migrate --schemas migrates the outbox of every matching schema, reports
// the one that fails without stopping the others, and may run twice at once.
func TestMigrateSchemas(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	prefix := testdb.NewSchemaName("ten")
	pool := testdb.Pool(t, "")
	create := func(name string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testdb.Drop(t, name) })
	}
	// prefix+"x" must not match prefix_*: the _ is literal.
	for _, s := range []string{prefix + "_a", prefix + "_b", prefix + "x"} {
		create(s)
	}
	all, err := outbox.Migrations(outbox.MigrateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	latest := all[len(all)-1].Version
	pattern := prefix + "_*"
	table := func(s string) string { return pgx.Identifier{s, "outbox_events"}.Sanitize() }

	r := run(t, dbEnv(), "migrate", "status", "--schemas", pattern, "--exit-code")
	wantExit(t, r, ExitNotMigrated)
	for _, s := range []string{prefix + "_a", prefix + "_b"} {
		if !strings.Contains(r.stdout, table(s)+": ") {
			t.Errorf("migrate status --schemas does not list %s:\n%s", s, r)
		}
	}
	if strings.Contains(r.stdout, table(prefix+"x")) {
		t.Errorf("migrate status --schemas %s lists %sx:\n%s", pattern, prefix, r)
	}

	// A tenant whose outbox_events is some other table: it fails, named,
	// and the others are migrated.
	create(prefix + "_c")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table(prefix+"_c")+" (id int)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	runs := make([]result, 2)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = run(t, dbEnv(), "migrate", "--schemas", pattern)
		}()
	}
	wg.Wait()
	for _, r := range runs {
		wantExit(t, r, ExitFailure)
		if !strings.Contains(r.stdout, table(prefix+"_c")+": failed: ") || !strings.Contains(r.stdout, "not an outbox table") ||
			!strings.Contains(r.stdout, "3 outbox(es): ") || !strings.Contains(r.stderr, "1 of 3 outboxes failed") {
			t.Errorf("migrate --schemas with a foreign table in one schema:\n%s", r)
		}
	}

	r = run(t, dbEnv(), "migrate", "status", "--schemas", pattern, "--json")
	wantExit(t, r, ExitFailure) // the foreign table
	var st struct {
		Outboxes []schemaResult
		Failed   int
		Pending  int
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("migrate status --schemas --json: %v\n%s", err, r)
	}
	if len(st.Outboxes) != 3 || st.Failed != 1 || st.Pending != 0 {
		t.Fatalf("migrate status --schemas --json after migrate: %+v", st)
	}
	for _, o := range st.Outboxes[:2] {
		if o.Error != "" || o.Pending != 0 || o.Version != latest {
			t.Errorf("%s after migrate --schemas: %+v; want version %d, nothing pending", o.Table, o, latest)
		}
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table(prefix+"x")).Scan(&exists); err != nil || exists {
		t.Errorf("migrate --schemas %s created %s (%v)", pattern, table(prefix+"x"), err)
	}

	r = run(t, dbEnv(), "migrate", "--schemas", prefix+"_a,"+prefix+"_b")
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "2 outbox(es): 0 migrated, 2 up to date, 0 failed") {
		t.Errorf("migrate --schemas again:\n%s", r)
	}
	r = run(t, dbEnv(), "migrate", "--schemas", "nomatch_"+prefix+"_*")
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "no schema matches") {
		t.Errorf("migrate --schemas matching nothing:\n%s", r)
	}
}

func TestMigrateSchemasUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "--schemas", "t_*", "--schema", "x"}, "give one"},
		{[]string{"migrate", "--schemas", "t_*", "--source", "wal"}, "table source only"},
		{[]string{"migrate", "sql", "--schemas", "t_*"}, "one schema"},
		{[]string{"migrate", "drop-wal", "--schemas", "t_*"}, "one outbox at a time"},
		{[]string{"migrate", "--schemas", "a,,b"}, "empty pattern"},
	} {
		r := run(t, dbEnv(), c.args...)
		wantExit(t, r, ExitUsage)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: stderr lacks %q:\n%s", c.args, c.want, r)
		}
	}
}
