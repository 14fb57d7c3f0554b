package wal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// The shared server is set up for logical replication, and the test role
// is a superuser: nothing is missing.
func TestCheckPasses(t *testing.T) {
	t.Parallel()
	pool := testdb.Logical(t).Pool(t, "")
	n := namesOf(t, testdb.NewSchemaName("t"), "outbox_events")
	if err := Check(context.Background(), pool, n); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// A role without REPLICATION gets one line naming the privilege and the
// fix for plain PostgreSQL, RDS and Cloud SQL; it cannot stream either.
func TestCheckRoleWithoutReplication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	role := "pgoutbox_norepl_" + hex.EncodeToString(suffix)
	if _, err := b.pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN NOREPLICATION"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := b.pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	conn, err := pgx.Connect(ctx, urlAs(t, role))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	err = Check(ctx, conn, b.names)
	var pe *PrereqError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPrerequisite) || pe.Setting != "the REPLICATION privilege" {
		t.Fatalf("check as %s: %v, want the REPLICATION privilege missing", role, err)
	}
	for _, want := range []string{"ALTER ROLE", "rds_replication", "Cloud SQL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	cfg := b.config()
	cfg.ConnString = urlAs(t, role)
	if s, err := Open(ctx, cfg); err == nil {
		_ = s.Close(ctx)
		t.Fatal("a role without REPLICATION opened a stream")
	}
}

// The checks that cannot be provoked on the shared server (its wal_level,
// its slots and WAL senders are everyone's), over the values the query
// would read.
func TestCheckSettings(t *testing.T) {
	ok := settings{walLevel: "logical", replication: true, maxSlots: 10, usedSlots: 2, maxWALSenders: 10, usedSenders: 1}
	n := namesOf(t, "", "outbox_events")
	if err := ok.check(n); err != nil {
		t.Fatalf("good settings: %v", err)
	}
	for _, c := range []struct {
		name    string
		edit    func(*settings)
		setting string
		says    []string
	}{
		{"wal_level replica", func(s *settings) { s.walLevel = "replica" }, "wal_level",
			[]string{`"replica"`, "wal_level = logical", "restart", "rds.logical_replication", "cloudsql.logical_decoding"}},
		{"no privilege", func(s *settings) { s.replication = false }, "the REPLICATION privilege", []string{"WITH REPLICATION"}},
		{"slots full", func(s *settings) { s.usedSlots = 10 }, "max_replication_slots", []string{"10 with 10 in use", "pg_replication_slots"}},
		{"senders full", func(s *settings) { s.usedSenders = 10 }, "max_wal_senders", []string{"10 with 10 in use"}},
		{"other plugin", func(s *settings) { s.slotExists, s.slotPlugin = true, "wal2json" }, "replication slot " + n.Slot, []string{"wal2json", "pgoutput"}},
	} {
		s := ok
		c.edit(&s)
		err := s.check(n)
		var pe *PrereqError
		if !errors.As(err, &pe) || pe.Setting != c.setting {
			t.Errorf("%s: %v, want a PrereqError for %s", c.name, err, c.setting)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %q is not one line", c.name, err)
		}
		for _, want := range c.says {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", c.name, err, want)
			}
		}
	}
	// Granted another way, or needing no new slot.
	for name, edit := range map[string]func(*settings){
		"superuser":            func(s *settings) { s.replication, s.superuser = false, true },
		"rds_replication":      func(s *settings) { s.replication, s.rdsRole = false, true },
		"slot exists, no free": func(s *settings) { s.usedSlots, s.slotExists, s.slotPlugin = 10, true, Plugin },
	} {
		s := ok
		edit(&s)
		if err := s.check(n); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
