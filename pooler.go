package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/pooler"
)

// listenProbeWait is how long the start check waits for its own
// notification behind a pooler: a session kept by the pooler gets it in
// milliseconds; behind a transaction pooler it never comes.
const listenProbeWait = time.Second

// checkPooler looks, once per start, at whether the relay's connections go
// through a connection pooler (PgBouncer, say), and if so at what of a
// session it keeps. Replication it cannot pass ends Run: an error wrapping
// ErrReplicationPrerequisite. Exec modes whose prepared statements it
// breaks, and a LISTEN it does not deliver, are one WARN line each naming
// the fix: the relay still works, with errors to retry or by polling. A
// direct connection costs one query. Other errors are outages, retried.
func (r *Relay) checkPooler(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout+listenProbeWait)
	defer cancel()
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("outbox: check for a connection pooler: %w", err)
	}
	defer conn.Release()
	pooled, err := pooler.Detect(ctx, conn.Conn())
	if err != nil || !pooled {
		return err
	}
	cc := r.pool.Config().ConnConfig
	// The listener and the stream use DirectConnConfig when it is set.
	session, sessionName := cc, "the relay's connections go"
	if r.cfg.Direct != nil {
		session, sessionName = r.cfg.Direct, "DirectConnConfig (outbox relay --direct-url) goes"
	}
	log := r.cfg.Logger.With("table", r.names.QTable)
	if r.cfg.WAL {
		if err := pooler.Replication(ctx, &session.Config); err != nil {
			return fmt.Errorf("%w: replication needs a direct connection to PostgreSQL, and %s through a connection pooler that refused it (%v): set DirectConnConfig (outbox relay --direct-url) to PostgreSQL itself, its host and port rather than PgBouncer's; the rest may stay behind the pooler",
				ErrReplicationPrerequisite, sessionName, err)
		}
	}
	switch cc.DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement:
		passes, err := pooler.NamedStatementsPass(ctx, conn.Conn())
		if err != nil {
			return fmt.Errorf("outbox: check the connection pooler: %w", err)
		}
		if passes {
			log.Warn(`outbox relay: the connections go through a connection pooler that does not keep prepared statements (PgBouncer before 1.21, or max_prepared_statements = 0), and pgx's default exec mode caches them: in transaction pooling, batches fail with "prepared statement ... already exists"; add default_query_exec_mode=cache_describe to the connection string (or set max_prepared_statements in PgBouncer 1.21+)`)
		}
	case pgx.QueryExecModeDescribeExec:
		log.Warn(`outbox relay: the connections go through a connection pooler, and default_query_exec_mode=describe_exec runs a statement in two round trips that a transaction pooler may send to two server connections ("bind message supplies 0 parameters"); use default_query_exec_mode=cache_describe`)
	}
	if r.cfg.Listen {
		reaches, err := pooler.ListenReaches(ctx, session, conn.Conn(), listenProbeWait)
		if err != nil {
			return fmt.Errorf("outbox: check LISTEN through the connection pooler: %w", err)
		}
		if !reaches {
			log.Warn("outbox relay: LISTEN does not reach the relay: "+sessionName+" through a connection pooler that keeps no session (PgBouncer in transaction mode), so it polls every PollInterval instead; set DirectConnConfig (outbox relay --direct-url) to PostgreSQL itself, or drop Listen (outbox relay --listen)",
				"poll_interval", r.cfg.PollInterval)
		}
	}
	return nil
}

// directOnly refuses what takes a session advisory lock (the WAL setup's)
// when pool's connections go through a pooler: the lock would stay on a
// server connection that other clients get next.
func directOnly(ctx context.Context, pool *pgxpool.Pool, what string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("outbox: %s: %w", what, err)
	}
	defer conn.Release()
	pooled, err := pooler.Detect(ctx, conn.Conn())
	if err != nil {
		return fmt.Errorf("outbox: %s: %w", what, err)
	}
	if pooled {
		return fmt.Errorf("outbox: %s needs a direct connection to PostgreSQL (it holds a session advisory lock), and this one goes through a connection pooler: connect to PostgreSQL itself (its host and port, not PgBouncer's)", what)
	}
	return nil
}
