package nats

import (
	"errors"
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
)

// JetStream API error codes (nats-server's errors.json) meaning the stream
// refuses every message for a reason of its own: it is full, the server is
// out of storage, or the stream has no leader. Publishing again later is the
// cure, so they are outages: the relay backs off and counts no attempt.
var refusesAll = map[jetstream.ErrorCode]string{
	10002: "the account's JetStream resource limits are exceeded",
	10008: "JetStream is temporarily unavailable",
	10009: "the JetStream cluster cannot handle the request (no leader)",
	10023: "JetStream has insufficient resources",
	10028: "JetStream has insufficient memory",
	10047: "JetStream has insufficient storage",
	10077: "the stream refused to store the message (a limit such as max_msgs or max_bytes with discard new)",
	10118: "the stream is offline",
	10039: "JetStream is not enabled for the account",
	10076: "JetStream is not enabled",
}

// headersTooLarge is the JetStream API error of a message whose headers
// pass the server's limit (64 KiB): the message's own fault.
const headersTooLarge jetstream.ErrorCode = 10097

// classify wraps a publish error with the relay's class. subject is where the
// message was going, named in the errors an operator has to act on.
func classify(err error, subject string) error {
	if !strings.HasPrefix(err.Error(), "nats: ") {
		err = fmt.Errorf("nats: %w", err)
	}
	var jsErr jetstream.JetStreamError
	if errors.As(err, &jsErr) && jsErr.APIError() != nil {
		if why, ok := refusesAll[jsErr.APIError().ErrorCode]; ok {
			return outbox.Unavailable(fmt.Errorf("%w: subject %q: %s", err, subject, why))
		}
		if jsErr.APIError().ErrorCode == headersTooLarge {
			return outbox.Permanent(fmt.Errorf("%w: the event's headers are larger than the server accepts; shorten them", err))
		}
	}
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return outbox.Permanent(err)
	case errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, natsgo.ErrConnectionDraining),
		errors.Is(err, natsgo.ErrConnectionReconnecting), errors.Is(err, natsgo.ErrDisconnected),
		errors.Is(err, natsgo.ErrNoServers):
		return outbox.Unavailable(err)
	case errors.Is(err, natsgo.ErrAuthorization), errors.Is(err, natsgo.ErrAuthExpired),
		errors.Is(err, natsgo.ErrAuthRevoked), errors.Is(err, natsgo.ErrPermissionViolation):
		// Credentials and permissions fail every message alike: back off
		// and keep the events rather than dead-letter the table.
		return outbox.Unavailable(err)
	case errors.Is(err, natsgo.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		// No stream captures the subject (or its stream has no leader):
		// every event for it would fail, so it is the destination that is
		// missing, not the message that is wrong.
		return outbox.Unavailable(NoStreamError{Subject: subject, Err: err})
	}
	return err
}

// NoStreamError is the error of a publish to a subject that no JetStream
// stream captures. It is classified unavailable: the relay keeps the events
// and backs off until an operator creates the stream (or the stream's
// leader is elected again).
type NoStreamError struct {
	Subject string
	Err     error
	// capture is the stream subject to suggest, from the publisher's
	// template; "" for one derived from Subject.
	capture string
}

func (e NoStreamError) Error() string {
	capture := e.capture
	if capture == "" {
		capture = streamSubjectFor(e.Subject)
	}
	return fmt.Sprintf("%v: no JetStream stream captures subject %q (or its stream has no leader); create one, "+
		"e.g. `nats stream add OUTBOX --subjects %q --storage file --defaults`, or let the publisher do it "+
		"(ensure_stream=OUTBOX in the broker URL, Config.EnsureStream)", e.Err, e.Subject, capture)
}

func (e NoStreamError) Unwrap() error { return e.Err }

// streamSubjectFor suggests a stream subject capturing subj when the
// template is not known: its first token followed by ">" ("orders.created"
// -> "orders.>").
func streamSubjectFor(subj string) string {
	first, _, found := strings.Cut(subj, ".")
	if !found {
		return subj
	}
	return first + ".>"
}
