package sqs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/pgoutbox/outbox"
)

// blocked is the error of a FIFO message not sent because an earlier one of
// its group failed: an outage stays an outage, anything else is transient
// (the message itself was never judged).
func blocked(group string, prev error) error {
	const format = "sqs: not sent: an earlier event of message group %q failed in this batch: %"
	if outbox.Classify(prev) == outbox.ClassPermanent {
		// That message is bad, this one was never judged: transient.
		return fmt.Errorf(format+"v", group, prev)
	}
	return fmt.Errorf(format+"w", group, prev)
}

// Authentication failures: every message fails alike, so the relay backs off
// (and logs) rather than dead-lettering the table.
var authCodes = map[string]bool{
	"InvalidClientTokenId": true, "SignatureDoesNotMatch": true, "ExpiredToken": true, "ExpiredTokenException": true,
	"UnrecognizedClientException": true, "MissingAuthenticationToken": true, "MissingAuthenticationTokenException": true,
	"IncompleteSignature": true, "IncompleteSignatureException": true, "InvalidSecurity": true,
	"AWS.SimpleQueueService.InvalidSecurity": true, "RequestExpired": true,
}

// Refusals that hit every message alike: the caller may not send to the
// queue (or use its KMS key), or SQS is throttling. They are outages, not the
// messages' fault: dead-lettering the table over a revoked policy or a burst
// of throttling would be worse than backing off.
var refusalCodes = map[string]bool{
	"AccessDenied": true, "AccessDeniedException": true, "KMS.AccessDeniedException": true,
	"KmsAccessDenied": true, "KmsAccessDeniedException": true, "KmsDisabled": true, "KmsInvalidState": true,
	"KmsNotFound": true, "KmsOptInRequired": true,
	"RequestThrottled": true, "ThrottlingException": true, "Throttling": true, "KmsThrottled": true,
	"KMS.ThrottlingException": true, "AWS.SimpleQueueService.RequestThrottled": true,
}

// classifyCall classifies an error of a whole SendMessageBatch call to
// queue.
func classifyCall(err error, queue string) error {
	var (
		noQueue *types.QueueDoesNotExist
		apiErr  smithy.APIError
	)
	switch {
	case errors.As(err, &noQueue):
		return outbox.Unavailable(MissingQueueError{QueueURL: queue, Err: err})
	case errors.As(err, &apiErr):
		code := apiErr.ErrorCode()
		switch {
		case code == "AWS.SimpleQueueService.NonExistentQueue" || code == "QueueDoesNotExist":
			return outbox.Unavailable(MissingQueueError{QueueURL: queue, Err: err})
		case refusalCodes[code], strings.HasPrefix(code, "KmsAccessDenied"):
			return outbox.Unavailable(err)
		case authCodes[code]:
			return outbox.Unavailable(err)
		}
	}
	if msg := err.Error(); strings.Contains(msg, "get identity: ") || strings.Contains(msg, "failed to retrieve credentials") {
		// No credentials could be had (the SDK has no error type for it,
		// only this text; TestUnavailable pins it): like a bad password,
		// it fails every message alike.
		return outbox.Unavailable(err)
	}
	var quota *ratelimit.QuotaExceededError
	if errors.As(err, &quota) {
		// The SDK's client-side retry budget ran out: the endpoint has been
		// failing call after call, an outage, not this message's fault.
		return outbox.Unavailable(err)
	}
	if outbox.Classify(err) == outbox.ClassUnavailable {
		return outbox.Unavailable(err) // refused, reset, DNS, dial
	}
	return err
}

// MissingQueueError is the error of a send to a queue that does not exist.
// It is classified unavailable: every event for the queue would fail alike,
// so the relay keeps them and backs off until the queue is created.
type MissingQueueError struct {
	QueueURL string
	Err      error
}

func (e MissingQueueError) Error() string {
	name := queueName(e.QueueURL)
	attrs := ""
	if strings.HasSuffix(name, ".fifo") {
		attrs = " --attributes FifoQueue=true"
	}
	return fmt.Sprintf("%v: queue %s does not exist; create it, e.g. `aws sqs create-queue --queue-name %s%s`, "+
		"or let the publisher do it (create_queues=true in the broker URL, Config.CreateQueues)", e.Err, e.QueueURL, name, attrs)
}

func (e MissingQueueError) Unwrap() error { return e.Err }

// serviceDown reports a failure that, when no message of the batch got
// through, means SQS is not answering: no answer at all, a request that was
// never answered, or a server fault (5xx).
func serviceDown(err error) bool {
	if outbox.Classify(err) != outbox.ClassTransient {
		return false
	}
	if outbox.NoAnswer(err) {
		return true
	}
	var sendErr *smithyhttp.RequestSendError // the request never got an answer
	if errors.As(err, &sendErr) {
		return true
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorFault() == smithy.FaultServer {
		return true
	}
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && re.HTTPStatusCode() >= 500
}
