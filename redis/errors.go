package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
)

// Errors a publish can fail with besides the connection's. Test with
// errors.Is.
var (
	// ErrNoStream: Config.RequireStream is set and the stream does not exist
	// (XADD NOMKSTREAM added nothing). It is wrapped as unavailable, with
	// the stream's name and the command creating it: every event for a
	// missing stream would fail alike, so the relay backs off and keeps them
	// until an operator creates the stream.
	ErrNoStream = errors.New("redis: stream does not exist")
	// ErrNotReplicated: the entry was added, but fewer than
	// Config.WaitReplicas replicas acknowledged it in time. Transient: the
	// relay publishes it again (a duplicate, if the first copy survives).
	ErrNotReplicated = errors.New("redis: entry not acknowledged by enough replicas")
)

// classify wraps an XADD's error with the relay's class.
// stream is named in the errors an operator has to act on.
func classify(err error, stream string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, goredis.Nil) { // NOMKSTREAM: no such stream
		return outbox.Unavailable(fmt.Errorf("%w: %q; create it with its consumer group, e.g. "+
			"`redis-cli XGROUP CREATE %s GROUP $ MKSTREAM`, or let the publisher create streams (drop require_stream)",
			ErrNoStream, stream, stream))
	}
	wrapped := fmt.Errorf("redis: %w", err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return wrapped
	}
	var reply goredis.Error
	if !errors.As(err, &reply) {
		// Not an answer from Redis: the connection failed (refused, reset,
		// EOF, timeout, pool timeout, closed client).
		return outbox.Unavailable(wrapped)
	}
	msg := reply.Error()
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "LOADING", "BUSY", "OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
		"NOAUTH", "WRONGPASS", "NOPERM", "NOREPLICAS", "MISCONF":
		// Redis refuses every write for now (out of memory, a replica, a
		// failover, credentials or ACLs): an outage, not the message's fault.
		return outbox.Unavailable(wrapped)
	case "WRONGTYPE":
		return outbox.Permanent(wrapped)
	case "ERR":
		if strings.Contains(msg, "max number of clients") {
			return outbox.Unavailable(wrapped)
		}
		return outbox.Permanent(wrapped)
	}
	return wrapped
}
