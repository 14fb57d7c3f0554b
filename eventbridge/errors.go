package eventbridge

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/pgoutbox/outbox"
)

// Refusals that hit every message alike: the caller may not put events on
// the bus (or with this source or detail-type), its credentials are
// refused, or EventBridge is throttling. They are outages, not the
// messages' fault: dead-lettering the table over a revoked policy or a
// burst of throttling would be worse than backing off.
var refusalCodes = map[string]bool{
	"AccessDeniedException": true, "AccessDenied": true,
	"NotAuthorizedForSourceException": true, "NotAuthorizedForDetailTypeException": true, "InvalidAccountIdException": true,
	"UnrecognizedClientException": true, "InvalidSignatureException": true, "IncompleteSignature": true,
	"MissingAuthenticationToken": true, "MissingAuthenticationTokenException": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "InvalidClientTokenId": true, "RequestExpired": true,
	"ThrottlingException": true, "Throttling": true, "LimitExceededException": true,
}

// Entry errors about the entry itself: resending it cannot help.
var entryCodes = map[string]bool{"MalformedDetail": true, "InvalidArgument": true, "RedactionFailure": true}

// classifyEntry classifies one failed entry of a PutEvents response.
func classifyEntry(bus, code, msg string) error {
	err := fmt.Errorf("eventbridge: PutEvents to %s: entry failed: %s: %s", bus, code, msg)
	switch {
	case refusalCodes[code]:
		return outbox.Unavailable(err)
	case entryCodes[code]:
		return outbox.Permanent(err)
	}
	return err // InternalFailure, and codes we do not know
}

// classifyCall classifies an error of a whole PutEvents call.
func classifyCall(err error, bus string) error {
	var (
		notFound *types.ResourceNotFoundException
		apiErr   smithy.APIError
	)
	switch {
	case errors.As(err, &notFound):
		return outbox.Unavailable(MissingBusError{Bus: bus, Err: err})
	case errors.As(err, &apiErr) && refusalCodes[apiErr.ErrorCode()]:
		return outbox.Unavailable(err)
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

// classifyBusCheck classifies an error of DescribeEventBus.
func classifyBusCheck(err error, bus string) error {
	err = fmt.Errorf("eventbridge: DescribeEventBus %s: %w", bus, err)
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode() == "AccessDeniedException" || apiErr.ErrorCode() == "AccessDenied") {
		return outbox.Unavailable(fmt.Errorf("%w; the publisher checks that the bus exists (PutEvents to a missing bus drops events silently): "+
			"grant the relay's role events:DescribeEventBus, or turn the check off (skip_bus_check=true in the broker URL, Config.SkipBusCheck)", err))
	}
	return classifyCall(err, bus)
}

// MissingBusError is the error of a publish to an event bus that does not
// exist. It is classified unavailable: every event for the bus would fail
// alike (or, unchecked, be dropped by EventBridge), so the relay keeps
// them and backs off until the bus is created.
type MissingBusError struct {
	Bus string
	Err error
}

func (e MissingBusError) Error() string {
	return fmt.Sprintf("%v: event bus %s does not exist; create it, e.g. `aws events create-event-bus --name %s`", e.Err, e.Bus, busName(e.Bus))
}

func (e MissingBusError) Unwrap() error { return e.Err }

// serviceDown reports a failure that, when no message of the batch got
// through, means EventBridge is not answering: no answer at all, a request
// that was never answered, or a server fault (5xx).
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
