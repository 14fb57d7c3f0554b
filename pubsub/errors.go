package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pgoutbox/outbox"
)

// isPaused reports the client's refusal to send a message because an
// earlier one of its ordering key failed.
func isPaused(err error) bool {
	var paused gpubsub.ErrPublishingPaused
	return errors.As(err, &paused)
}

// blocked is the error of a message the client held back because an
// earlier message of its ordering key failed. With cause, that failure in
// this batch, an outage stays an outage and anything else is transient (the
// message itself was never judged). Without one, the failure was a message
// of an earlier batch whose result came after that batch gave up (the
// client retries until PublishTimeout): most likely the service not
// answering, so the message, never sent, is unavailable rather than charged
// an attempt.
func blocked(topic, key string, err, cause error) error {
	const format = "pubsub: publish to %s: not sent: an earlier event of ordering key %q failed: %"
	switch {
	case cause == nil:
		return outbox.Unavailable(fmt.Errorf(format+"w", topic, key, err))
	case outbox.Classify(cause) == outbox.ClassUnavailable:
		return fmt.Errorf(format+"w", topic, key, cause)
	}
	return fmt.Errorf(format+"v", topic, key, cause)
}

// classify wraps err, a message's failure, with the relay's class. topic is
// named in the errors an operator has to act on.
func classify(err error, topic string) error {
	if errors.Is(err, gpubsub.ErrOversizedMessage) {
		return outbox.Permanent(err)
	}
	if errors.Is(err, gpubsub.ErrPublisherStopped) {
		// Closed: nothing to send with, and the message is not at fault.
		return outbox.Unavailable(err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// PublishTimeout ran out in the client's retries: the service did
		// not answer.
		return outbox.Unavailable(err)
	}
	switch status.Code(err) {
	case codes.InvalidArgument:
		// About the request, which publishes one message alone once it was
		// refused together with others (PublishBatch): the message's.
		return outbox.Permanent(err)
	case codes.NotFound:
		// Every message for that topic would fail: the destination is
		// missing, not the message wrong.
		return outbox.Unavailable(MissingTopicError{Topic: topic, Err: err})
	case codes.PermissionDenied, codes.Unauthenticated:
		// Credentials and IAM fail every message alike: back off and keep
		// the events rather than dead-letter the table.
		return outbox.Unavailable(err)
	case codes.ResourceExhausted:
		// A quota or throttling: every message alike.
		return outbox.Unavailable(err)
	case codes.FailedPrecondition:
		// The topic cannot take messages now (its Cloud KMS key disabled,
		// say): every message alike.
		return outbox.Unavailable(err)
	case codes.Unavailable, codes.DeadlineExceeded:
		// No answer after the client's retries.
		return outbox.Unavailable(err)
	}
	if outbox.Classify(err) == outbox.ClassUnavailable {
		return outbox.Unavailable(err) // refused, reset, DNS, dial
	}
	return err
}

// MissingTopicError is the error of a publish to a topic that does not
// exist. It is classified unavailable: every event for the topic would fail
// alike, so the relay keeps them and backs off until the topic is created.
type MissingTopicError struct {
	Topic string // projects/PROJECT/topics/ID
	Err   error
}

func (e MissingTopicError) Error() string {
	project, id := "PROJECT", e.Topic
	if parts := strings.Split(e.Topic, "/"); len(parts) == 4 {
		project, id = parts[1], parts[3]
	}
	return fmt.Sprintf("%v: topic %s does not exist; create it, e.g. `gcloud pubsub topics create %s --project %s`, "+
		"or let the publisher do it (create_topics=true in the broker URL, Config.CreateTopics)", e.Err, e.Topic, id, project)
}

func (e MissingTopicError) Unwrap() error { return e.Err }
