package outbox

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// Rules shared by the publisher packages for telling a destination that is
// down, or refuses everything, from a message that is at fault. A publisher
// applies its broker's own knowledge first (an error code meaning "stream
// full", "not authorized"), then these.

// NoAnswer reports whether err means a request got no answer from the
// destination: a deadline or timeout, or a connection closed or reset while
// the request was in flight (EOF, ECONNRESET, a closed connection). Such an
// error says nothing about the message.
func NoAnswer(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ClassifyBatch applies the whole-batch rule to the results of one batch, in
// place, and returns errs: when no message of the batch was confirmed, every
// failure for which outage reports true is wrapped with Unavailable, so the
// relay backs off as a whole and counts no attempt. When at least one message
// was confirmed the destination is answering, and each failure keeps its own
// class: it is the message's.
//
// outage nil means NoAnswer. A publisher passes its own predicate to add the
// answers that, coming for every message, mean the destination refuses
// everything (HTTP 503 or 401 from every request, throttling). Only failures
// Classify calls transient are considered: a permanent one stays the
// message's, an unavailable one is one already.
func ClassifyBatch(errs []error, outage func(error) bool) []error {
	if outage == nil { // not cmp.Or: a func is not comparable
		outage = NoAnswer
	}
	if len(errs) == 0 {
		return errs
	}
	for _, err := range errs {
		if err == nil {
			return errs
		}
	}
	for i, err := range errs {
		if Classify(err) == ClassTransient && outage(err) {
			errs[i] = Unavailable(err)
		}
	}
	return errs
}
