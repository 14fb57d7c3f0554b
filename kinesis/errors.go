package kinesis

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/pgoutbox/outbox"
)

// blocked is the error of a record not sent because an earlier one with its
// partition key failed: an outage stays an outage, anything else is
// transient (the record itself was never judged).
func blocked(key string, prev error) error {
	const format = "kinesis: not sent: an earlier event with partition key %q failed in this batch: %"
	if outbox.Classify(prev) == outbox.ClassPermanent {
		return fmt.Errorf(format+"v", key, prev)
	}
	return fmt.Errorf(format+"w", key, prev)
}

// Refusals that hit every record alike: the shard or the stream is over its
// throughput (back-pressure: waiting is the cure, not counting attempts),
// the caller may not write to the stream or use its KMS key, or its
// credentials are refused. They are outages, not the records' fault.
var refusalCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true, "LimitExceededException": true,
	"ThrottlingException": true, "Throttling": true,
	"AccessDeniedException": true, "AccessDenied": true,
	"KMSAccessDeniedException": true, "KMSDisabledException": true, "KMSInvalidStateException": true,
	"KMSNotFoundException": true, "KMSOptInRequired": true, "KMSThrottlingException": true,
	"UnrecognizedClientException": true, "InvalidSignatureException": true, "IncompleteSignature": true,
	"MissingAuthenticationToken": true, "MissingAuthenticationTokenException": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "InvalidClientTokenId": true, "RequestExpired": true,
	"ResourceInUseException": true, // the stream is being created, updated or deleted
}

// throttleCodes are a record's throttling codes; throttleWait is how long
// such a record waits when its shard alone is throttled (a shard's
// throughput is counted per second).
var throttleCodes = map[string]bool{"ProvisionedThroughputExceededException": true, "ThrottlingException": true, "Throttling": true}

const throttleWait = time.Second

// classifyRecord classifies one failed record of a PutRecords response.
func classifyRecord(stream, code, msg string) error {
	err := fmt.Errorf("kinesis: PutRecords to %s: record failed: %s: %s", stream, code, msg)
	if throttleCodes[code] {
		// A shard over its throughput: back-pressure. If the others take
		// their records meanwhile, the relay retries this one after the
		// wait without counting an attempt.
		return outbox.Unavailable(outbox.RetryAfter(err, throttleWait))
	}
	if refusalCodes[code] {
		return outbox.Unavailable(err)
	}
	return err // InternalFailure, and codes we do not know
}

// classifyCall classifies an error of a whole call about stream.
func classifyCall(err error, stream string) error {
	var (
		notFound *types.ResourceNotFoundException
		apiErr   smithy.APIError
	)
	switch {
	case errors.As(err, &notFound):
		return outbox.Unavailable(MissingStreamError{Stream: stream, Err: err})
	case errors.As(err, &apiErr) && refusalCodes[apiErr.ErrorCode()]:
		return outbox.Unavailable(err)
	}
	if msg := err.Error(); strings.Contains(msg, "get identity: ") || strings.Contains(msg, "failed to retrieve credentials") {
		// No credentials could be had (the SDK has no error type for it,
		// only this text; TestUnavailable pins it): like a bad password,
		// it fails every record alike.
		return outbox.Unavailable(err)
	}
	var quota *ratelimit.QuotaExceededError
	if errors.As(err, &quota) {
		// The SDK's client-side retry budget ran out: the endpoint has been
		// failing call after call, an outage, not this record's fault.
		return outbox.Unavailable(err)
	}
	if outbox.Classify(err) == outbox.ClassUnavailable {
		return outbox.Unavailable(err) // refused, reset, DNS, dial
	}
	return err
}

// MissingStreamError is the error of a publish to a stream that does not
// exist. It is classified unavailable: every event for the stream would
// fail alike, so the relay keeps them and backs off until the stream is
// created.
type MissingStreamError struct {
	Stream string
	Err    error
}

func (e MissingStreamError) Error() string {
	return fmt.Sprintf("%v: stream %s does not exist; create it, e.g. `aws kinesis create-stream --stream-name %s --stream-mode-details StreamMode=ON_DEMAND`",
		e.Err, e.Stream, streamName(e.Stream))
}

func (e MissingStreamError) Unwrap() error { return e.Err }

// serviceDown reports a failure that, when no record of the batch got
// through, means Kinesis is not answering: no answer at all, a request that
// was never answered, or a server fault (5xx).
func serviceDown(err error) bool {
	if outbox.Classify(err) != outbox.ClassTransient {
		return false
	}
	if outbox.NoAnswer(err) {
		return true
	}
	var sendErr *smithyhttp.RequestSendError
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
