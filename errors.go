package outbox

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/pgoutbox/outbox/internal/dberr"
	"github.com/pgoutbox/outbox/internal/engine"
	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrPermanent marks a publish error that retrying cannot fix (a message
	// over the broker's size limit, an authorization failure): the row becomes
	// a dead letter at once.
	ErrPermanent = errors.New("permanent publish error")
	// ErrUnavailable marks a publish error caused by the broker being
	// unreachable rather than by the message: the relay backs off as a whole
	// and burns no attempt, so an outage never produces dead letters.
	ErrUnavailable = errors.New("broker unavailable")
	// ErrNotMigrated is returned when the outbox table is missing or older than
	// this version of pgoutbox: run `outbox migrate` (or Migrate).
	ErrNotMigrated = errors.New("outbox table not migrated")
	// ErrNotOutboxTable is returned when a table of the outbox table's name
	// exists but is some other table (it lacks the outbox's columns):
	// Migrate refuses it before changing anything, and the relay and package
	// admin report it instead of ErrNotMigrated, since migrating cannot
	// help. Name the outbox table otherwise (MigrateConfig.Table), or rename
	// the other.
	ErrNotOutboxTable = store.ErrNotOutboxTable
	// ErrTableSetUpForWAL is returned, with ErrNotMigrated, by a relay with
	// the table source on a table set up for the WAL source: SetupReplication
	// (`outbox migrate --source wal`) dropped the indexes only a table
	// source reads. Relay it with SourceWAL, or set it up for the table
	// source again with DropReplication (`outbox migrate drop-wal`).
	ErrTableSetUpForWAL = engine.ErrWALTable
	// ErrClientEncoding is returned by Relay.Run when the pool's connections
	// do not use client_encoding UTF8 (a LATIN1 database's default): the
	// relay reads event types and payloads as UTF-8. Set client_encoding=UTF8
	// in the connection string; the outbox command does.
	ErrClientEncoding = engine.ErrClientEncoding
	// ErrStuck is what Relay.Ready returns (wrapped, with the counts and
	// the cause when known) while events are due and none reached the
	// destination for RelayConfig.StuckAfter.
	ErrStuck = errors.New("outbox relay stuck")
	// ErrDatabaseTLS is matched by the error Relay.Run returns at start when
	// the TLS connection to PostgreSQL cannot be set up: the server's
	// certificate is not signed by the CA in sslrootcert, does not name the
	// host connected to, or has expired, or the server refuses TLS. Its text
	// names the server, the cause and the fix; waiting cannot fix it, so Run
	// does not retry.
	ErrDatabaseTLS = dberr.ErrTLS
)

type classified struct {
	kind error
	err  error
}

func (c *classified) Error() string {
	if c.err == nil {
		return c.kind.Error()
	}
	return c.err.Error()
}
func (c *classified) Unwrap() []error { return []error{c.kind, c.err} }

// Permanent wraps err so the relay dead-letters the message immediately.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &classified{kind: ErrPermanent, err: err}
}

// Unavailable wraps err so the relay treats it as a broker outage: the message
// is left untouched and the relay backs off. Unavailable(nil) is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &classified{kind: ErrUnavailable, err: err}
}

// ErrorClass is how the relay treats a publish error (see Classify).
type ErrorClass = outboxtype.ErrorClass

const (
	// ClassTransient: retry this message later with backoff, counting an attempt.
	ClassTransient = outboxtype.ClassTransient
	// ClassPermanent: dead-letter this message now.
	ClassPermanent = outboxtype.ClassPermanent
	// ClassUnavailable: the broker is down; retry later without counting an attempt.
	ClassUnavailable = outboxtype.ClassUnavailable
)

// Classify tells how the relay treats err. Explicit wrapping with Permanent or
// Unavailable wins; otherwise network errors that mean "cannot reach the
// broker" (connection refused or reset, DNS failure, dial errors) count as
// unavailable, and everything else as transient.
func Classify(err error) ErrorClass {
	switch {
	case err == nil:
		return ClassTransient
	case errors.Is(err, ErrPermanent):
		return ClassPermanent
	case errors.Is(err, ErrUnavailable):
		return ClassUnavailable
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EPIPE):
		return ClassUnavailable
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return ClassUnavailable
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return ClassUnavailable
	}
	return ClassTransient
}

// isTimeout reports a publish that ran out of time, which, for a whole batch,
// means the broker is not answering.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// RetryAfterError carries a broker's request to wait before the next attempt
// (HTTP 429/503 Retry-After, a throttling response). The relay waits at least
// After, or its own backoff if longer.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns err wrapped in a *RetryAfterError. RetryAfter(nil, d) is nil.
func RetryAfter(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{After: after, Err: err}
}

// retryAfterer is what the relay looks for in a publish error's chain, so a
// publisher package may define its own error type with this method.
type retryAfterer interface{ RetryAfter() time.Duration }

// RetryAfter returns the requested delay.
func (e *RetryAfterError) RetryAfter() time.Duration { return e.After }

// RequestedDelay returns the delay a publish error asks for, if any.
func RequestedDelay(err error) (time.Duration, bool) {
	var ra retryAfterer
	if errors.As(err, &ra) {
		return ra.RetryAfter(), true
	}
	return 0, false
}

// ConfigError is a configuration a constructor rejected (NewRelay,
// NewWriter, NewNotifier, Migrate and its siblings; admin.New, the
// publishers, the inbox and the console return it too). Read it with
// errors.As to point at what set the field, as the outbox command does with
// its flags. It is defined in package outboxtype, which the publishers and
// the inbox share with this package.
type ConfigError = outboxtype.ConfigError
