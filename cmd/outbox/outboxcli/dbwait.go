package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/dberr"
)

// dbWaitSettings say whether the relay waits for an unreachable database at
// start instead of exiting 3: under an orchestrator the database may come up
// after the relay (or restart under it), and an exit there is a crash loop.
type dbWaitSettings struct {
	wait    bool
	timeout time.Duration
}

func (w *dbWaitSettings) register(o *options) {
	o.fs.BoolVar(&w.wait, "wait-for-db", true, "at start, wait for an unreachable database (retrying with the --outage-base/--outage-max backoff, not ready meanwhile) instead of exiting 3")
	o.fs.DurationVar(&w.timeout, "db-wait-timeout", 0, "with --wait-for-db, exit 3 if the database still does not answer after this long (0: wait until stopped)")
}

func (w *dbWaitSettings) validate(o *options) error {
	if w.timeout < 0 {
		return o.settingErr("db-wait-timeout", "%s: must not be negative (0 waits until stopped)", w.timeout)
	}
	return nil
}

// fatalConnectError reports a failure that waiting cannot cure: the server
// answered and refused the credentials or the database name, or TLS could
// not be set up (a certificate the client refuses, a server without TLS).
// Everything else (refused or timed-out connections, DNS, a server starting
// up or out of connection slots) may pass.
func fatalConnectError(err error) bool {
	if errors.Is(err, dberr.ErrTLS) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code[:2] {
	case "28", "3D": // invalid authorization; invalid catalog (no such database)
		return true
	}
	return false
}

// waitForDB pings the database until it answers. Without --wait-for-db, or
// for a fatal error, the first failure is returned (exit 3). While it waits,
// it logs each failure with the next delay and, when --http-addr is set,
// serves /healthz (200) and /readyz (503) so that an orchestrator keeps the
// process alive but sends it nothing.
func (c *cli) waitForDB(ctx context.Context, o *options, pool *pgxpool.Pool, log *slog.Logger, s *relaySettings) error {
	if err := s.dbWait.validate(o); err != nil {
		return err
	}
	err := ping(ctx, pool)
	if err == nil || !s.dbWait.wait || fatalConnectError(err) || ctx.Err() != nil {
		return err
	}
	if s.httpAddr != "" {
		stop, lerr := c.serveWaiting(s.httpAddr)
		if lerr != nil {
			return fmt.Errorf("--http-addr: %w", lerr)
		}
		defer stop()
	}
	start := time.Now()
	delay := s.cfg.OutageBackoff.Base
	for attempt := 1; ; attempt++ {
		if s.dbWait.timeout > 0 && time.Since(start)+delay > s.dbWait.timeout {
			return &exitError{code: ExitDatabase, err: fmt.Errorf("%w (gave up after --db-wait-timeout %s)", err, s.dbWait.timeout)}
		}
		log.Warn("database unreachable: waiting for it (not ready)", "err", redactDSN(oneLine(err.Error())),
			"attempt", attempt, "retry_in", delay, "waited", time.Since(start).Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if err = ping(ctx, pool); err == nil {
			log.Info("database reachable", "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if fatalConnectError(err) || ctx.Err() != nil {
			return err
		}
		delay = min(2*delay, s.cfg.OutageBackoff.Max)
	}
}

// serveWaiting serves /healthz and a failing /readyz on addr until stop is
// called; the relay's own server takes the address over afterwards.
func (c *cli) serveWaiting(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: waiting for the database", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on stop
	return func() { srv.Close() }, nil
}

// logged writes the error that stops the relay at start to its log, in the
// configured format, with its exit code; the command then prints it as its
// one-line exit reason as every command does. A stop requested by a signal is
// returned as is.
func logged(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() != nil {
		return err
	}
	log.Error("outbox relay cannot start", "err", redactDSN(oneLine(err.Error())), "exit_code", exitCode(err))
	return err
}

// exitCode is the exit code err carries (ExitFailure if none), for logs.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitFailure
}
