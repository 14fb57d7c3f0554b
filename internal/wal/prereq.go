package wal

import (
	"context"
	"errors"
	"fmt"
)

// ErrPrerequisite is what every *PrereqError matches with errors.Is: the
// server or the role cannot stream from a logical replication slot.
var ErrPrerequisite = errors.New("logical replication prerequisite missing")

// PrereqError is a missing prerequisite of the WAL source: Setting names the
// server setting or role attribute, Have what the server reports, Fix what
// to do about it. Error reads as one line an operator can act on.
type PrereqError struct {
	Setting string
	Have    string
	Fix     string
}

func (e *PrereqError) Error() string {
	return fmt.Sprintf("WAL source: %s is %s: %s", e.Setting, e.Have, e.Fix)
}

// Is makes errors.Is(err, ErrPrerequisite) true.
func (e *PrereqError) Is(target error) bool { return target == ErrPrerequisite }

// settings is what Check reads from the server, in one query.
type settings struct {
	walLevel      string
	replication   bool // the role may open replication connections
	superuser     bool
	rdsRole       bool // member of rds_replication (Amazon RDS, Aurora)
	maxSlots      int
	usedSlots     int
	slotExists    bool // the table's slot exists already: it needs no free one
	slotPlugin    string
	maxWALSenders int
	usedSenders   int
}

// settingsQuery reads every prerequisite at once. pg_roles has no row for
// rds_replication outside Amazon RDS, hence the COALESCE over a subquery.
const settingsQuery = `
SELECT current_setting('wal_level'),
       r.rolreplication,
       r.rolsuper,
       COALESCE((SELECT pg_has_role(current_user, g.oid, 'MEMBER') FROM pg_roles g WHERE g.rolname = 'rds_replication'), false),
       current_setting('max_replication_slots')::int,
       (SELECT count(*)::int FROM pg_replication_slots),
       EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
       COALESCE((SELECT plugin::text FROM pg_replication_slots WHERE slot_name = $1), ''),
       current_setting('max_wal_senders')::int,
       (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'walsender')
FROM pg_roles r
WHERE r.rolname = current_user`

// Check verifies that the role db connects as can stream the table's slot:
// wal_level is logical, the role has REPLICATION (or is a superuser, or a
// member of RDS's rds_replication), a slot is free unless the table's slot
// exists, and a WAL sender is free. The first missing one is returned as a
// *PrereqError.
func Check(ctx context.Context, db DB, n Names) error {
	s, err := readSettings(ctx, db, n)
	if err != nil {
		return err
	}
	return s.check(n)
}

func readSettings(ctx context.Context, db DB, n Names) (settings, error) {
	var s settings
	err := db.QueryRow(ctx, settingsQuery, n.Slot).Scan(&s.walLevel, &s.replication, &s.superuser, &s.rdsRole,
		&s.maxSlots, &s.usedSlots, &s.slotExists, &s.slotPlugin, &s.maxWALSenders, &s.usedSenders)
	if err != nil {
		return s, fmt.Errorf("WAL source: read replication settings: %w", err)
	}
	return s, nil
}

func (s settings) check(n Names) error {
	switch {
	case s.walLevel != "logical":
		return &PrereqError{Setting: "wal_level", Have: fmt.Sprintf("%q", s.walLevel),
			Fix: "set wal_level = logical and restart PostgreSQL (Amazon RDS/Aurora: rds.logical_replication = 1 in the parameter group; Google Cloud SQL: the cloudsql.logical_decoding flag = on)"}
	case !s.replication && !s.superuser && !s.rdsRole:
		return &PrereqError{Setting: "the REPLICATION privilege", Have: "missing for the relay's role",
			Fix: "ALTER ROLE <role> WITH REPLICATION (Amazon RDS/Aurora: GRANT rds_replication TO <role>; Google Cloud SQL: ALTER USER <role> WITH REPLICATION)"}
	case s.slotExists && s.slotPlugin != Plugin:
		return &PrereqError{Setting: "replication slot " + n.Slot, Have: fmt.Sprintf("using plugin %q", s.slotPlugin),
			Fix: fmt.Sprintf("it must use %s: drop it (SELECT pg_drop_replication_slot('%s')) and let the relay create it", Plugin, n.Slot)}
	case !s.slotExists && s.usedSlots >= s.maxSlots:
		return &PrereqError{Setting: "max_replication_slots", Have: fmt.Sprintf("%d with %d in use", s.maxSlots, s.usedSlots),
			Fix: "raise max_replication_slots (restart) or drop an unused slot (see pg_replication_slots)"}
	case s.usedSenders >= s.maxWALSenders:
		return &PrereqError{Setting: "max_wal_senders", Have: fmt.Sprintf("%d with %d in use", s.maxWALSenders, s.usedSenders),
			Fix: "raise max_wal_senders (restart)"}
	}
	return nil
}
