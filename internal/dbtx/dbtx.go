// Package dbtx is the one way pgoutbox runs the same SQL through either
// driver a user may hand it: pgx (a pool, a connection, a transaction) or
// database/sql (a *sql.DB, a *sql.Tx, any PostgreSQL driver). Code that only
// executes statements is written once against Querier or Tx; the public API
// keeps taking the user's own pgx.Tx or *sql.Tx and wraps it here.
package dbtx

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements.
type Querier interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
	// Query runs a query; the caller closes the rows.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
}

// Rows is the part of pgx.Rows and *sql.Rows that both have.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Tx is a transaction the code holding it commits or rolls back. Rollback
// may be deferred: after Commit it does nothing but return an error.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// PgxQuerier is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type PgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SQLQuerier is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Pgx wraps a pgx pool, connection or transaction.
func Pgx(q PgxQuerier) Querier { return pgxQ{q} }

// PgxTx wraps a pgx transaction.
func PgxTx(tx pgx.Tx) Tx { return pgxTx{pgxQ{tx}, tx} }

// SQL wraps a database/sql handle, connection or transaction.
func SQL(q SQLQuerier) Querier { return sqlQ{q} }

// SQLTx wraps a database/sql transaction.
func SQLTx(tx *sql.Tx) Tx { return sqlTx{sqlQ{tx}, tx} }

type pgxQ struct{ q PgxQuerier }

func (p pgxQ) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (p pgxQ) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	return p.q.Query(ctx, q, args...)
}

type pgxTx struct {
	pgxQ
	tx pgx.Tx
}

func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

type sqlQ struct{ q SQLQuerier }

func (s sqlQ) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQ) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	rows, err := s.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// sqlRows drops Close's error: Err reports what went wrong while reading.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

type sqlTx struct {
	sqlQ
	tx *sql.Tx
}

// database/sql transactions take no context at commit: the one given to
// BeginTx governs them.
func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }
