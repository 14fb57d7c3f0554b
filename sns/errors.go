package sns

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/pgoutbox/outbox"
)

// blocked is the error of a FIFO message not sent because an earlier one of
// its group failed: an outage stays an outage, anything else is transient
// (the message itself was never judged).
func blocked(group string, prev error) error {
	const format = "sns: not sent: an earlier event of message group %q failed in this batch: %"
	if outbox.Classify(prev) == outbox.ClassPermanent {
		return fmt.Errorf(format+"v", group, prev)
	}
	return fmt.Errorf(format+"w", group, prev)
}

// Refusals that hit every message alike: the caller may not publish to the
// topic or use its KMS key, its credentials are refused, or SNS is
// throttling. They are outages, not the messages' fault: dead-lettering the
// table over a revoked policy or a burst of throttling would be worse than
// backing off.
var refusalCodes = map[string]bool{
	"AuthorizationError": true, "AccessDenied": true, "AccessDeniedException": true,
	"InvalidClientTokenId": true, "SignatureDoesNotMatch": true, "ExpiredToken": true, "ExpiredTokenException": true,
	"UnrecognizedClientException": true, "MissingAuthenticationToken": true, "IncompleteSignature": true,
	"InvalidSecurity": true, "RequestExpired": true,
	"Throttled": true, "Throttling": true, "ThrottlingException": true,
	"KMSAccessDenied": true, "KMSDisabled": true, "KMSInvalidState": true, "KMSNotFound": true,
	"KMSOptInRequired": true, "KMSThrottling": true,
}

// classifyCall classifies an error of a whole call about topic.
func classifyCall(err error, topic string) error {
	var (
		notFound *types.NotFoundException
		apiErr   smithy.APIError
	)
	switch {
	case errors.As(err, &notFound):
		return outbox.Unavailable(MissingTopicError{TopicARN: topic, Err: err})
	case errors.As(err, &apiErr):
		switch code := apiErr.ErrorCode(); {
		case code == "NotFound":
			return outbox.Unavailable(MissingTopicError{TopicARN: topic, Err: err})
		case refusalCodes[code]:
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

// classifyEntry classifies one failed entry of a PublishBatch response: a
// refusal that would hit every message is unavailable; otherwise
// SenderFault says whether the request was wrong (permanent) or SNS failed
// (transient).
func classifyEntry(topic string, f types.BatchResultErrorEntry) error {
	err := fmt.Errorf("sns: PublishBatch to %s: entry failed: %s: %s", topic, aws.ToString(f.Code), aws.ToString(f.Message))
	switch {
	case refusalCodes[aws.ToString(f.Code)]:
		return outbox.Unavailable(err)
	case f.SenderFault:
		return outbox.Permanent(err) // the request was wrong: resending it cannot help
	}
	return err
}

// MissingTopicError is the error of a publish to a topic that does not
// exist. It is classified unavailable: every event for the topic would fail
// alike, so the relay keeps them and backs off until the topic is created.
type MissingTopicError struct {
	TopicARN string
	Err      error
}

func (e MissingTopicError) Error() string {
	name := topicName(e.TopicARN)
	attrs := ""
	if strings.HasSuffix(name, ".fifo") {
		attrs = " --attributes FifoTopic=true"
	}
	return fmt.Sprintf("%v: topic %s does not exist; create it, e.g. `aws sns create-topic --name %s%s`", e.Err, e.TopicARN, name, attrs)
}

func (e MissingTopicError) Unwrap() error { return e.Err }

// serviceDown reports a failure that, when no message of the batch got
// through, means SNS is not answering: no answer at all, a request that was
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
