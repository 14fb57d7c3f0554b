package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/dberr"
	"github.com/pgoutbox/outbox/internal/pooler"
)

// connectTimeout bounds connecting when the DSN does not say
// (connect_timeout): a black-holed host must fail, not hang.
const connectTimeout = 10 * time.Second

// poolConfig validates d and returns a pool configuration. It registers the
// DSN's password with the redactor before anything can print it.
func (c *cli) poolConfig(o *options, d *dbOptions, maxConns int32) (*pgxpool.Config, error) {
	c.red.addDSN(d.DatabaseURL)
	if d.DatabaseURL == "" {
		return nil, o.settingErr("database-url", "required (or set DATABASE_URL)")
	}
	if _, err := outbox.NewWriter(outbox.WriterConfig{Schema: d.Schema, Table: d.Table}); err != nil {
		return nil, flagError(err)
	}
	cfg, err := pgxpool.ParseConfig(d.DatabaseURL)
	if err != nil {
		return nil, o.settingErr("database-url", "%s", redactDSN(err.Error()))
	}
	tuneConn(cfg.ConnConfig, o.cmd)
	if maxConns > 0 && !strings.Contains(d.DatabaseURL, "pool_max_conns") {
		cfg.MaxConns = maxConns
	}
	return cfg, nil
}

// tuneConn gives a connection config the commands' defaults, where the DSN
// does not say otherwise.
func tuneConn(cc *pgx.ConnConfig, cmd string) {
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = connectTimeout
		cc.DialFunc = (&net.Dialer{Timeout: connectTimeout}).DialContext
	}
	// A server that vanished (host down, partition) fails the statement in
	// outbox.DefaultTCPUserTimeout instead of the kernel's ~15 minutes; the
	// commands' Admin calls have their own deadline on top
	// (admin.DefaultStatementTimeout, or the DSN's statement_timeout
	// plus 5s).
	outbox.SetTCPTimeouts(&cc.Config, 0)
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "outbox " + cmd
	}
	// Text in and out as UTF-8 whatever the database's encoding (LATIN1,
	// say): the relay refuses connections in another client encoding.
	if _, ok := cc.RuntimeParams["client_encoding"]; !ok {
		cc.RuntimeParams["client_encoding"] = "UTF8"
	}
}

// directConfig parses --direct-url, the relay's connection to PostgreSQL
// itself for LISTEN and the WAL source's stream when --database-url goes
// through a pooler. It registers its password with the redactor first.
func (c *cli) directConfig(o *options, dsn string) (*pgx.ConnConfig, error) {
	c.red.addDSN(dsn)
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, o.settingErr("direct-url", "%s", redactDSN(err.Error()))
	}
	tuneConn(cc, o.cmd)
	return cc, nil
}

// connect opens a pool and checks that the database answers; failing that, it
// returns an ExitDatabase error.
func (c *cli) connect(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, &exitError{code: ExitDatabase, err: fmt.Errorf("database: %w", err)}
	}
	if err := ping(ctx, pool); err != nil {
		closePool(pool)
		return nil, err
	}
	pool, _, err = poolerSafe(ctx, pool, cfg)
	return pool, err
}

// poolerSafe returns pool, or, when its connections go through a pooler
// that passes pgx's named prepared statements through to whichever server
// connection it lends (PgBouncer before 1.21 in transaction mode) and the
// DSN leaves the exec mode to pgx, closes it and returns a new pool on cfg
// with default_query_exec_mode=cache_describe, which prepares only unnamed
// statements, each in the round trip that runs it; switched says so. A
// probe that fails leaves pool as it is: the command reports the database's
// errors itself.
func poolerSafe(ctx context.Context, pool *pgxpool.Pool, cfg *pgxpool.Config) (_ *pgxpool.Pool, switched bool, _ error) {
	if strings.Contains(cfg.ConnString(), "default_query_exec_mode") || cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return pool, false, nil
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+5*time.Second)
	defer cancel()
	conn, err := pool.Acquire(pctx)
	if err != nil {
		return pool, false, nil
	}
	pooled, err := pooler.Detect(pctx, conn.Conn())
	if err == nil && pooled {
		pooled, err = pooler.NamedStatementsPass(pctx, conn.Conn())
	}
	conn.Release()
	if err != nil || !pooled {
		return pool, false, nil
	}
	closePool(pool)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, false, &exitError{code: ExitDatabase, err: fmt.Errorf("database: %w", err)}
	}
	return pool, true, nil
}

// poolCloseWait bounds closePool.
const poolCloseWait = time.Second

// closePool closes pool, waiting at most poolCloseWait. pgxpool's Close waits
// up to 15s for each connection abandoned mid-statement to say goodbye to
// the server (a cancel request, then reading until the server hangs up); on a
// database that stopped answering that is 15s of nothing after the command's
// error is printed. The command is about to exit: the leftover cleanup is not
// worth waiting for.
func closePool(pool *pgxpool.Pool) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		pool.Close()
	}()
	select {
	case <-closed:
	case <-time.After(poolCloseWait):
	}
}

// ping checks that the database answers, as an ExitDatabase error.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	pctx, cancel := context.WithTimeout(ctx, pool.Config().ConnConfig.ConnectTimeout+time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		return &exitError{code: ExitDatabase, err: connectError(pool.Config().ConnConfig, err)}
	}
	return nil
}

// connectError says why the database refused the connection when the server
// answered (no such database, role or password), and "unreachable" only
// when it did not: each has its own fix.
func connectError(cc *pgx.ConnConfig, err error) error {
	if terr := dberr.TLS(cc, err); terr != nil {
		return terr // the certificate, the host name or the server's ssl setting
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		server := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
		switch pgErr.Code {
		case "3D000": // invalid_catalog_name
			return fmt.Errorf("database %q does not exist on %s: create it (createdb %s), or fix the database name in --database-url: %w",
				cc.Database, server, cc.Database, err)
		case "28P01": // invalid_password
			return fmt.Errorf("the server at %s refused the password of role %q: fix the password in --database-url (or PGPASSWORD, ~/.pgpass): %w",
				server, cc.User, err)
		case "08P01": // protocol_violation: PgBouncer refusing a startup parameter
			if param, ok := strings.CutPrefix(pgErr.Message, "unsupported startup parameter: "); ok {
				return fmt.Errorf("the connection pooler at %s (PgBouncer) refused the startup parameter %s: remove it from --database-url, or list it in PgBouncer's ignore_startup_parameters (the setting is then not applied): %w",
					server, param, err)
			}
		case "28000": // invalid_authorization_specification: no such role, or no pg_hba.conf entry
			return fmt.Errorf("the server at %s refused role %q: create the role, fix the user in --database-url, or allow it in pg_hba.conf: %w",
				server, cc.User, err)
		}
	}
	return fmt.Errorf("database unreachable: %w", err)
}

// openDB is poolConfig then connect, for the commands that need nothing more.
func (c *cli) openDB(ctx context.Context, o *options, d *dbOptions) (*pgxpool.Pool, error) {
	cfg, err := c.poolConfig(o, d, 2)
	if err != nil {
		return nil, err
	}
	return c.connect(ctx, cfg)
}

// notMigrated returns err, reworded when it means the table is missing: the
// library's message quotes PostgreSQL's; the operator needs the remedy.
func notMigrated(table string, d *dbOptions, err error) error {
	return notMigratedHint(table, d, "", err)
}

// notMigratedHint is notMigrated with extra flags for the migrate command it
// suggests (" --source wal").
func notMigratedHint(table string, d *dbOptions, extra string, err error) error {
	if !errors.Is(err, outbox.ErrNotMigrated) {
		return err
	}
	var flags string
	if d.Schema != "" {
		flags += " --schema " + d.Schema
	}
	if d.Table != "" && d.Table != outbox.DefaultTable {
		flags += " --table " + d.Table
	}
	if errors.Is(err, outbox.ErrTableSetUpForWAL) {
		return &exitError{code: ExitNotMigrated, err: fmt.Errorf("table %s is set up for the WAL source (outbox migrate --source wal): run the relay with --source wal, or set the table up for the table source again with outbox migrate drop-wal%s", table, flags)}
	}
	return &exitError{code: ExitNotMigrated, err: fmt.Errorf("table %s is missing or not migrated: run outbox migrate%s%s", table, extra, flags)}
}
