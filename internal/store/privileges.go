package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox/internal/ident"
)

// The privileges each job needs, as docs/OPERATING.md's "Database roles"
// grants them. A check reads them with has_*_privilege for current_user
// and names the first one missing with the GRANT that gives it, so a role
// set up by hand learns what it lacks in one line, before it fails halfway.

// ErrPrivilege is matched by a *PrivilegeError.
var ErrPrivilege = errors.New("missing privilege")

// PrivilegeError is a privilege the connected role lacks for its job.
type PrivilegeError struct {
	Role   string // current_user, as PostgreSQL spells it
	Kind   string // "schema" or "table"
	Object string // the quoted, qualified name
	Priv   string // USAGE, SELECT, INSERT, UPDATE, DELETE
	Grant  string // the statement that gives it, for the owner to run
	Err    error  // the PostgreSQL error that revealed it, if any
}

func (e *PrivilegeError) Error() string {
	return fmt.Sprintf("permission denied for %s %s: %s (docs/OPERATING.md#database-roles)", e.Kind, e.Object, e.Grant)
}

func (e *PrivilegeError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrPrivilege}
	}
	return []error{ErrPrivilege, e.Err}
}

// Need is one privilege a job needs: USAGE on the table's schema, or a
// table privilege. With Columns, the privilege on each of them is enough
// (the tighter, column-level GRANTs); the GRANT named when it is missing is
// the table-level one.
type Need struct {
	Table   string // "" for the schema's USAGE; else the raw table name, in the outbox's schema
	Priv    string
	Columns []string
}

// Job is a set of needs with a name for messages.
type Job struct {
	Name  string
	Needs []Need
}

var (
	writerColumns  = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "deliver_at"}
	relayUpdates   = []string{"processed_at", "attempts", "last_error", "retry_after", "dead_at", "held_by", "deliver_at"}
	consoleUpdates = []string{"attempts", "retry_after", "dead_at", "held_by"}
)

func cancelsName(n ident.Names) string { return strings.TrimSuffix(n.Table, "_events") + "_cancels" }

// WriterJob is what Writer.Write and a plain INSERT need.
func WriterJob(n ident.Names) Job {
	return Job{Name: "writer", Needs: []Need{{Priv: "USAGE"}, {Table: n.Table, Priv: "INSERT", Columns: writerColumns}}}
}

// RelayJob is what a relay needs: claims and marks; with the WAL source,
// reading the cancellations table and deleting the rows it streamed;
// deletes when it deletes published rows (DeleteOnPublish, Retention).
func RelayJob(n ident.Names, wal, deletes bool) Job {
	j := Job{Name: "relay", Needs: []Need{
		{Priv: "USAGE"},
		{Table: n.Table, Priv: "SELECT"},
		{Table: n.Table, Priv: "UPDATE", Columns: relayUpdates},
	}}
	if wal || deletes {
		j.Needs = append(j.Needs, Need{Table: n.Table, Priv: "DELETE"})
	}
	if wal {
		j.Needs = append(j.Needs, Need{Table: cancelsName(n), Priv: "SELECT"})
	}
	return j
}

// ReadJob is what the console's pages and the read-only commands (status,
// dead-letters) need.
func ReadJob(n ident.Names) Job {
	return Job{Name: "read", Needs: []Need{{Priv: "USAGE"}, {Table: n.Table, Priv: "SELECT"}}}
}

// ActionsJob is what retry, discard and cancel (the console's actions and
// the commands) need besides ReadJob.
func ActionsJob(n ident.Names) Job {
	return Job{Name: "actions", Needs: []Need{
		{Priv: "USAGE"},
		{Table: n.Table, Priv: "SELECT"},
		{Table: n.Table, Priv: "UPDATE", Columns: consoleUpdates},
		{Table: n.Table, Priv: "DELETE"},
		{Table: cancelsName(n), Priv: "SELECT"},
		{Table: cancelsName(n), Priv: "UPDATE"},
	}}
}

// CleanupJob is what outbox cleanup needs.
func CleanupJob(n ident.Names) Job {
	return Job{Name: "cleanup", Needs: []Need{{Priv: "USAGE"}, {Table: n.Table, Priv: "SELECT"}, {Table: n.Table, Priv: "DELETE"}}}
}

// ReplayJob is what outbox replay (and replay list, replay cancel) needs:
// it reads the archive, inserts copies, and keeps one row per replay.
func ReplayJob(n ident.Names) Job {
	reps, arch := strings.TrimSuffix(n.Table, "_events")+"_replays", n.Table+"_archive"
	return Job{Name: "replay", Needs: []Need{
		{Priv: "USAGE"},
		{Table: n.Table, Priv: "SELECT"},
		{Table: n.Table, Priv: "INSERT"},
		{Table: n.Table, Priv: "DELETE"},
		{Table: reps, Priv: "SELECT"},
		{Table: reps, Priv: "INSERT"},
		{Table: reps, Priv: "UPDATE"},
		{Table: arch, Priv: "SELECT"},
	}}
}

// ArchiveJob is what outbox archive needs: it moves processed rows to the
// archive table.
func ArchiveJob(n ident.Names) Job {
	arch := n.Table + "_archive"
	return Job{Name: "archive", Needs: []Need{
		{Priv: "USAGE"},
		{Table: n.Table, Priv: "SELECT"},
		{Table: n.Table, Priv: "UPDATE"},
		{Table: n.Table, Priv: "DELETE"},
		{Table: arch, Priv: "SELECT"},
		{Table: arch, Priv: "INSERT"},
	}}
}

// CancelJob is what outbox cancel needs: ActionsJob, and reading the
// archive for the ids already delivered.
func CancelJob(n ident.Names) Job {
	j := ActionsJob(n)
	j.Name = "cancel"
	j.Needs = append(j.Needs, Need{Table: n.Table + "_archive", Priv: "SELECT"})
	return j
}

// Querier is what the checks run on: a pool, a connection, a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// privilegeCheck answers, for current_user, whether the schema $1 (” for
// the search_path's) exists and may be used, whether table $2 exists in
// it, and whether it has privilege $3 on the table, or on every column of
// $4 (NULL: table-level only). The oid forms never raise an error on a
// missing object or privilege. The names are compared as name, so that
// the catalogs' indexes answer: a sequential scan of a bloated pg_class
// outlasts a tight statement_timeout, and the relay could never start.
// The text comparison beside it keeps a name longer than 63 bytes from
// matching its truncation.
const privilegeCheck = `WITH s AS (
    SELECT n.oid FROM pg_namespace AS n
    WHERE n.nspname = CASE WHEN $1::text = '' THEN (SELECT m.nspname FROM pg_namespace AS m, pg_class AS c
                                                  WHERE c.oid = to_regclass(quote_ident($2::text)) AND m.oid = c.relnamespace)
                           ELSE $1::text::name END
      AND ($1::text = '' OR n.nspname::text = $1::text)),
t AS (
    SELECT c.oid FROM pg_class AS c, s WHERE c.relnamespace = s.oid AND c.relname = $2::text::name AND c.relname::text = $2::text)
SELECT current_user::text,
       (SELECT nspname::text FROM pg_namespace WHERE oid = (SELECT oid FROM s)),
       COALESCE((SELECT has_schema_privilege(oid, 'USAGE') FROM s), false),
       EXISTS (SELECT 1 FROM t),
       COALESCE((SELECT has_table_privilege(t.oid, $3::text)
                    OR ($4::text[] IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM unnest($4::text[]) AS col
                                        WHERE NOT has_column_privilege(t.oid, col, $3::text)))
                 FROM t), false)`

// Check returns a *PrivilegeError for the first of job's needs that
// current_user lacks, nil when it has them all (a table that does not
// exist is not checked: the callers report a missing table their own way),
// or the error of the check itself.
func Check(ctx context.Context, q Querier, n ident.Names, job Job) error {
	for _, need := range job.Needs {
		table := need.Table
		if table == "" {
			table = n.Table
		}
		var role string
		var schema *string
		var usage, exists, has bool
		var cols []string
		if need.Columns != nil {
			cols = need.Columns
		}
		priv := need.Priv
		if need.Table == "" {
			priv = "SELECT" // the schema's USAGE comes in its own column
		}
		if err := q.QueryRow(ctx, privilegeCheck, n.Schema, table, priv, cols).Scan(&role, &schema, &usage, &exists, &has); err != nil {
			return fmt.Errorf("check the privileges of the %s: %w", job.Name, err)
		}
		qrole := pgx.Identifier{role}.Sanitize()
		if schema == nil {
			return nil // no such schema, or the table is not on the search_path: not a privilege
		}
		qschema := pgx.Identifier{*schema}.Sanitize()
		if !usage {
			return &PrivilegeError{Role: role, Kind: "schema", Object: qschema, Priv: "USAGE",
				Grant: "GRANT USAGE ON SCHEMA " + qschema + " TO " + qrole}
		}
		if need.Table == "" || !exists {
			continue
		}
		if !has {
			qt := qschema + "." + pgx.Identifier{table}.Sanitize()
			return &PrivilegeError{Role: role, Kind: "table", Object: qt, Priv: need.Priv,
				Grant: "GRANT " + need.Priv + " ON " + qt + " TO " + qrole}
		}
	}
	return nil
}

// IsInsufficientPrivilege reports whether err is PostgreSQL's
// insufficient_privilege (SQLSTATE 42501).
func IsInsufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// Explain returns err as a *PrivilegeError naming the GRANT when it is an
// insufficient_privilege error and one of job's needs is missing; else
// err. It runs the check on q, so q must not be a transaction the error
// aborted.
func Explain(ctx context.Context, q Querier, n ident.Names, job Job, err error) error {
	if !IsInsufficientPrivilege(err) {
		return err
	}
	perr := Check(ctx, q, n, job)
	var pe *PrivilegeError
	if !errors.As(perr, &pe) {
		return err
	}
	pe.Err = err
	return pe
}

// WriterDenied returns err as a *PrivilegeError when it is the
// insufficient_privilege of a writer's INSERT, else err. The writer's
// transaction is aborted by then, so nothing is queried: the schema named
// by PostgreSQL's message lacks USAGE, else the table lacks INSERT. role
// is the role the writer connected as ("" when unknown: database/sql).
func WriterDenied(n ident.Names, role string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return err
	}
	qrole := "<the application's role>"
	if role != "" {
		qrole = pgx.Identifier{role}.Sanitize()
	}
	if rest, ok := strings.CutPrefix(pgErr.Message, "permission denied for schema "); ok {
		qs := pgx.Identifier{rest}.Sanitize()
		return &PrivilegeError{Role: role, Kind: "schema", Object: qs, Priv: "USAGE",
			Grant: "GRANT USAGE ON SCHEMA " + qs + " TO " + qrole, Err: err}
	}
	return &PrivilegeError{Role: role, Kind: "table", Object: n.QTable, Priv: "INSERT",
		Grant: "GRANT INSERT ON " + n.QTable + " TO " + qrole, Err: err}
}
