package testdb

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// recorder is a testing.TB that keeps its cleanups and errors for the test
// to inspect instead of acting on them.
type recorder struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}
func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// A slot left behind fails the test and is dropped; a slot the test
// dropped passes.
func TestReplicationObjectsGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := Logical(t)
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exists := func(slot string) bool {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, leak := range []bool{true, false} {
		slot := NewSchemaName("guard")
		if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
			t.Fatal(err)
		}
		r := &recorder{TB: t}
		srv.ReplicationObjects(r, slot, "")
		if !leak {
			if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
				t.Fatal(err)
			}
		}
		r.runCleanups()
		switch {
		case leak && (len(r.errs) != 1 || !strings.Contains(r.errs[0], "left replication slot "+slot+" behind")):
			t.Errorf("leaked slot reported as %q", r.errs)
		case !leak && len(r.errs) != 0:
			t.Errorf("dropped slot reported as %q", r.errs)
		case exists(slot):
			t.Errorf("slot %s still exists after the guard", slot)
		}
	}
}
