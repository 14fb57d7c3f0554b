package wal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/pgoutbox/outbox/internal/ident"
)

// namePrefix starts every publication and slot pgoutbox creates, so an
// operator listing pg_replication_slots sees whose they are.
const namePrefix = "pgoutbox_"

// Names are the replication objects of one outbox table.
type Names struct {
	Table ident.Names // the outbox table
	// Database is the database the table is in (current_database()): slot
	// names are cluster-wide, so the slot's name includes it.
	Database string

	// Slot is the replication slot's name: only [a-z0-9_], at most 63
	// bytes, as PostgreSQL requires of slot names. It is safe to splice
	// into replication commands and to pass as a bind parameter.
	Slot string
	// LegacySlot is the name versions before 0.x gave the slot, without the
	// database: Resolve adopts a slot of that name in the table's database,
	// so an upgraded relay resumes where its predecessor stopped.
	LegacySlot string
	// Publication is the publication's name, raw; QPublication is it
	// quoted for SQL. Publications belong to one database: the name is
	// the table's alone.
	Publication  string
	QPublication string
}

// NamesFor derives the publication and slot names of the table n in
// database. The names are deterministic (every relay of one table finds
// the same slot) and distinct for distinct tables and databases:
// "pgoutbox_<database>_<schema>_<table>" sanitized, plus a hash of the
// exact three, so "A.b", "a.b" and "a_b" never share a slot, nor two
// databases' "outbox_events". Relays call Resolve, which also finds a slot
// of the name older versions gave.
func NamesFor(n ident.Names, database string) Names {
	pub := legacyName(n.Schema, n.Table)
	return Names{Table: n, Database: database, Slot: slotName(database, n.Schema, n.Table), LegacySlot: pub,
		Publication: pub, QPublication: ident.Quote(pub)}
}

// Resolve is NamesFor in db's current database, with Slot the legacy name
// when a slot of that name exists in this database and none of the new
// name does: a deployment from before the database was in the name keeps
// its slot and position.
func Resolve(ctx context.Context, db DB, n ident.Names) (Names, error) {
	var database string
	if err := db.QueryRow(ctx, `SELECT current_database()`).Scan(&database); err != nil {
		return Names{}, fmt.Errorf("WAL source: read the database name: %w", err)
	}
	names := NamesFor(n, database)
	var legacy bool
	err := db.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)
   AND EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $2 AND database = current_database())`,
		names.Slot, names.LegacySlot).Scan(&legacy)
	if err != nil {
		return Names{}, fmt.Errorf("WAL source: look up slot %s: %w", names.Slot, err)
	}
	if legacy {
		names.Slot = names.LegacySlot
	}
	return names, nil
}

// Adopted reports whether n streams a slot of the legacy name.
func (n Names) Adopted() bool { return n.Slot == n.LegacySlot }

// Fresh is n with the slot of the current name: what a relay creates when
// the slot it streamed is lost.
func (n Names) Fresh() Names {
	n.Slot = slotName(n.Database, n.Table.Schema, n.Table.Table)
	return n
}

func slotName(database, schema, table string) string {
	target := table
	if schema != "" {
		target = schema + "_" + table
	}
	name := namePrefix + sanitize(database+"_"+target)
	// The hash separates the three with a byte no identifier holds: "a_b"."c"
	// and "a"."b_c" read the same joined.
	sum := sha256.Sum256([]byte(database + "\x00" + schema + "\x00" + table))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if max := ident.MaxLen - len(suffix); len(name) > max {
		name = name[:max]
	}
	return name + suffix
}

// slotNameSQL is slotName computed by the server, in its current database,
// for scripts run by hand: it matches slotName for any database name.
func slotNameSQL(schema, table string) string {
	target := table
	if schema != "" {
		target = schema + "_" + table
	}
	lit := func(s string) string { return "convert_to(" + literal(s) + ", 'UTF8')" }
	return "left(" + literal(namePrefix) + " || regexp_replace(translate(current_database() || '_' || " + literal(target) +
		", 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), '[^a-z0-9_]', '_', 'g'), " +
		fmt.Sprint(ident.MaxLen-9) + ") || '_' || left(encode(sha256(convert_to(current_database(), 'UTF8') || '\\x00'::bytea || " +
		lit(schema) + " || '\\x00'::bytea || " + lit(table) + "), 'hex'), 8)"
}

// legacyName is the name older versions gave slot and publication alike:
// "pgoutbox_<table>" when the table name is already a valid slot name and
// no schema is configured, otherwise the sanitized schema and name plus a
// hash of the exact ones.
func legacyName(schema, table string) string {
	target := table
	if schema != "" {
		target = schema + "." + table
	}
	clean := sanitize(target)
	name := namePrefix + clean
	if schema == "" && clean == table && len(name) <= ident.MaxLen {
		return name
	}
	sum := sha256.Sum256([]byte(schema + "\x00" + table))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if max := ident.MaxLen - len(suffix); len(name) > max {
		name = name[:max]
	}
	return name + suffix
}

// sanitize maps s onto the slot-name charset: lower-case ASCII letters,
// digits and underscores; anything else becomes an underscore.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r - 'A' + 'a')
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// validSlotName reports whether s is a name PostgreSQL accepts for a slot.
func validSlotName(s string) bool {
	if s == "" || len(s) > ident.MaxLen {
		return false
	}
	return sanitize(s) == s
}
