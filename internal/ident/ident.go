// Package ident validates and quotes the SQL identifiers that users configure
// (schema and table names) and derives every object name pgoutbox creates from
// them. Nothing configured by a user is ever spliced into SQL unquoted.
package ident

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/outboxtype"
)

// DefaultTable is the outbox table's default name.
const DefaultTable = "outbox_events"

// MaxLen is PostgreSQL's NAMEDATALEN-1: longer identifiers are silently
// truncated by the server, which could make two configured names collide.
const MaxLen = 63

// Names holds the quoted, ready-to-splice names of every object that belongs to
// one outbox table.
type Names struct {
	Schema string // raw schema name ("" means the search_path)
	Table  string // raw table name

	QTable          string // "schema"."table"
	QDeadLetterView string // "schema"."<base>_dead_letters"
	QMigrations     string // "schema"."pgoutbox_migrations"
	PendingIndex    string // "<table>_pending_idx" (unqualified: an index lives in its table's schema); migration 8 drops it
	ProcessedIndex  string // "<table>_processed_idx"
	DeadIndex       string // "<table>_dead_idx"
	AggregateIndex  string // "<table>_aggregate_idx"
	QSchema         string // "schema" or "" when unset

	// Target identifies this outbox in the migrations table and in advisory
	// locks; it is always passed as a bind parameter, never spliced.
	Target string
	// Channel is the LISTEN/NOTIFY channel name (a bind parameter to
	// pg_notify, quoted for LISTEN).
	Channel string
}

// FieldError is a configured identifier that cannot be used. Field is the
// name Validate was given ("schema", "table"); Error reads "field: reason".
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks one configured identifier. Quoting makes any other
// character safe inside a statement, but names also reach places quoting does
// not protect: a line of a printed script, a log line, a terminal. A newline
// there ends the line, so control characters are refused outright.
func Validate(field, name string) error {
	switch {
	case name == "":
		return fieldErr(field, "must not be empty")
	case len(name) > MaxLen:
		return fieldErr(field, "%q is %d bytes long, PostgreSQL identifiers are at most %d", name, len(name), MaxLen)
	case !utf8.ValidString(name):
		return fieldErr(field, "%q is not valid UTF-8", name)
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return fieldErr(field, "%q contains the control character %U at byte %d (newlines, tabs and other control characters are not allowed in names)", name, r, i)
		}
	}
	return nil
}

// Quote returns name as a quoted SQL identifier.
func Quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// New validates schema and table and derives every name. An empty table means
// DefaultTable; an empty schema means "resolve through search_path", as a
// hand-written unqualified INSERT INTO outbox_events does.
func New(schema, table string) (Names, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := Validate("table", table); err != nil {
		return Names{}, err
	}
	if schema != "" {
		if err := Validate("schema", schema); err != nil {
			return Names{}, err
		}
	}
	base := strings.TrimSuffix(table, "_events")
	view := base + "_dead_letters"
	for field, derived := range map[string]string{
		"dead-letter view": view,
		"aggregate index":  table + "_aggregate_idx",
	} {
		if len(derived) > MaxLen {
			return Names{}, fieldErr("table", "%q is too long: the derived %s name %q exceeds %d bytes", table, field, derived, MaxLen)
		}
	}
	q := func(n string) string {
		if schema == "" {
			return Quote(n)
		}
		return pgx.Identifier{schema, n}.Sanitize()
	}
	n := Names{
		Schema:          schema,
		Table:           table,
		QTable:          q(table),
		QDeadLetterView: q(view),
		QMigrations:     q("pgoutbox_migrations"),
		PendingIndex:    Quote(table + "_pending_idx"),
		ProcessedIndex:  Quote(table + "_processed_idx"),
		DeadIndex:       Quote(table + "_dead_idx"),
		AggregateIndex:  Quote(table + "_aggregate_idx"),
		Target:          table,
		Channel:         "pgoutbox_" + table,
	}
	if schema != "" {
		n.QSchema = Quote(schema)
		n.Target = schema + "." + table
		n.Channel = "pgoutbox_" + schema + "." + table
	}
	if len(n.Channel) > MaxLen {
		n.Channel = strings.ToValidUTF8(n.Channel[:MaxLen], "")
	}
	return n, nil
}

// ConfigErr returns err, from validating config's Schema or Table (New,
// Validate), as the *outboxtype.ConfigError a constructor returns, naming
// the field as spelled in Go ("Schema", "Table"); config is the struct as
// its user spells it ("RelayConfig", "admin.Config"). An error that is not
// a *FieldError is reported against Table.
func ConfigErr(config string, err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return &outboxtype.ConfigError{Config: config, Field: "Table", Err: err}
	}
	field := strings.ToUpper(fe.Field[:1]) + fe.Field[1:]
	return &outboxtype.ConfigError{Config: config, Field: field, Err: errors.New(fe.Reason)}
}
