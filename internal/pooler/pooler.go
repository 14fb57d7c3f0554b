// Package pooler tells whether a connection reaches PostgreSQL through a
// connection pooler (PgBouncer, say), and what of a session survives it:
// named prepared statements, LISTEN, a replication connection. The relay
// checks at start and the CLI chooses its exec mode with it.
//
// Every probe runs in pgx's exec mode (the unnamed statement), so it
// prepares nothing whatever the connection's default_query_exec_mode, and
// works whatever its client_encoding (the simple protocol needs UTF8).
package pooler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const simple = pgx.QueryExecModeExec

// Detect reports whether conn goes through a pooler: the backend that
// answers is not the one whose key the client got at startup. PostgreSQL
// sends each session its own process id; PgBouncer (and the poolers like
// it) sends one of its own, since the client's server connection changes.
// A plain TCP proxy passes the key through unchanged, and is no pooler.
func Detect(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", simple).Scan(&pid); err != nil {
		return false, fmt.Errorf("read pg_backend_pid(): %w", err)
	}
	return pid != conn.PgConn().PID(), nil
}

// NamedStatementsPass reports whether a named prepared statement reaches
// the server under the client's name. Behind a pooler that is what breaks
// pgx's statement cache (default_query_exec_mode=cache_statement): the
// statement stays on a server connection the client may not get again and
// that other clients get ("prepared statement ... already exists", "...
// does not exist"). PgBouncer 1.21 and later, with max_prepared_statements
// set, renames them and prepares them where they are used: false.
func NamedStatementsPass(ctx context.Context, conn *pgx.Conn) (bool, error) {
	name := "pgoutbox_probe_" + randomHex()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := conn.Prepare(ctx, name, "SELECT 1"); err != nil {
		return false, fmt.Errorf("prepare a probe statement: %w", err)
	}
	var passed bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_prepared_statements WHERE name = '"+name+"')", simple).Scan(&passed); err != nil {
		return false, fmt.Errorf("read pg_prepared_statements: %w", err)
	}
	if err := conn.Deallocate(ctx, name); err != nil {
		return false, fmt.Errorf("deallocate the probe statement: %w", err)
	}
	return passed, tx.Commit(ctx)
}

// ListenReaches reports whether a session LISTENing through cfg receives a
// notification sent on notify's connection within wait. Behind a pooler in
// transaction mode it does not: the LISTEN ran on a server connection that
// went back to the pool, and the notification goes to whichever client
// has it next, or nowhere.
func ListenReaches(ctx context.Context, cfg *pgx.ConnConfig, notify *pgx.Conn, wait time.Duration) (bool, error) {
	lc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer lc.Close(context.WithoutCancel(ctx))
	channel := "pgoutbox_probe_" + randomHex()
	if _, err := lc.Exec(ctx, "LISTEN "+channel, simple); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	if _, err := notify.Exec(ctx, "NOTIFY "+channel, simple); err != nil {
		return false, fmt.Errorf("notify: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err = lc.WaitForNotification(wctx)
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case wctx.Err() != nil:
		return false, nil
	}
	return false, fmt.Errorf("wait for the probe notification: %w", err)
}

// Replication opens and closes a logical replication connection with cfg,
// returning why it failed. PgBouncer before 1.23 refuses it ("unsupported
// startup parameter: replication").
func Replication(ctx context.Context, cfg *pgconn.Config) error {
	rc := cfg.Copy()
	params := make(map[string]string, len(rc.RuntimeParams)+1)
	for k, v := range rc.RuntimeParams {
		params[k] = v
	}
	params["replication"] = "database"
	rc.RuntimeParams = params
	conn, err := pgconn.ConnectConfig(ctx, rc)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return errors.New(pgErr.Message)
		}
		return err
	}
	return conn.Close(context.WithoutCancel(ctx))
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
