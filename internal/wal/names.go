package wal

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/pgoutbox/outbox/internal/ident"
)

// namePrefix starts every publication and slot pgoutbox creates, so an
// operator listing pg_replication_slots sees whose they are.
const namePrefix = "pgoutbox_"

// Names are the replication objects of one outbox table.
type Names struct {
	Table ident.Names // the outbox table

	// Slot is the replication slot's name: only [a-z0-9_], at most 63
	// bytes, as PostgreSQL requires of slot names. It is safe to splice
	// into replication commands and to pass as a bind parameter.
	Slot string
	// Publication is the publication's name (the same text as Slot), raw;
	// QPublication is it quoted for SQL.
	Publication  string
	QPublication string
}

// NamesFor derives the publication and slot names of the table n. The
// names are deterministic (every relay of one table finds the same slot)
// and distinct for distinct tables: "pgoutbox_<table>" when the table name
// is already a valid slot name and no schema is configured, otherwise the
// table's sanitized schema and name plus a hash of the exact ones, so
// "A.b", "a.b" and "a_b" never share a slot.
func NamesFor(n ident.Names) Names {
	name := slotName(n.Schema, n.Table)
	return Names{Table: n, Slot: name, Publication: name, QPublication: ident.Quote(name)}
}

func slotName(schema, table string) string {
	target := table
	if schema != "" {
		target = schema + "." + table
	}
	clean := sanitize(target)
	name := namePrefix + clean
	if schema == "" && clean == table && len(name) <= ident.MaxLen {
		return name
	}
	// The hash separates schema and table with a byte no identifier holds:
	// "a.b"."c" and "a"."b.c" read the same joined with a dot.
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
