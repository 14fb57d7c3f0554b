package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/outbox"
)

// errRefusing marks answers meaning the endpoint refuses requests for a
// reason of its own (overloaded, down behind its proxy, throttling): 429,
// 502, 503, 504. From every request of a batch, they are an outage.
var errRefusing = errors.New("the endpoint refuses requests")

func refusing(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusBadGateway ||
		code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// authError is a 401 or 403 answer: an outage when every request of the
// batch got it, this message's permanent failure when others got through.
type authError struct{ msg string }

func (e *authError) Error() string {
	return e.msg + " (the receiver refused the request's credentials or signature; check the shared secret, " +
		"Config.Header and the relay's clock)"
}

// blockedError is the error of a message not sent because an earlier one of
// its aggregate failed in the batch. It never counts as this message's own
// verdict: an outage stays an outage, anything else is transient.
type blockedError struct {
	aggregate string
	prev      error
}

func (e *blockedError) Error() string {
	return fmt.Sprintf("webhook: not sent: an earlier event of aggregate %q failed in this batch: %v", e.aggregate, e.prev)
}

// Unwrap keeps the earlier failure's outage-ness, not its permanence: a
// permanent failure is that message's, not this one's.
func (e *blockedError) Unwrap() error {
	if outbox.Classify(e.prev) == outbox.ClassPermanent {
		return nil
	}
	return e.prev
}

func blocked(aggregate string, prev error) error {
	return &blockedError{aggregate: aggregate, prev: prev}
}

// endpointDown reports a failure that, from every request of a batch, means
// the endpoint is down or refuses everything: no answer, a dropped
// connection, 429/502/503/504, 401/403.
func endpointDown(err error) bool {
	var auth *authError
	return outbox.NoAnswer(err) || errors.Is(err, errRefusing) || errors.As(err, &auth)
}

// classifyBatch applies outbox.ClassifyBatch, then makes the 401/403 that
// were not an outage (other requests got through) permanent: this message's
// own.
func classifyBatch(errs []error) []error {
	errs = outbox.ClassifyBatch(errs, endpointDown)
	for i, err := range errs {
		var (
			auth *authError
			blk  *blockedError
		)
		if errors.As(err, &auth) && !errors.As(err, &blk) && outbox.Classify(err) == outbox.ClassTransient {
			errs[i] = outbox.Permanent(err)
		}
	}
	return errs
}

// statusError classifies an HTTP answer: nil for 2xx.
func statusError(resp *http.Response, target string, snippet []byte, now time.Time) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	msg := fmt.Sprintf("webhook: POST %s: %s", target, resp.Status)
	if s := printable(snippet); s != "" {
		msg += ": " + s
	}
	switch {
	case code >= 300 && code < 400:
		loc := resp.Header.Get("Location")
		if u, err := resp.Request.URL.Parse(loc); err == nil && loc != "" {
			loc = u.Redacted()
		}
		return outbox.Permanent(fmt.Errorf("%s: redirect to %q not followed; configure the final URL", msg, loc))
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		// Signatures made with a skewed clock, a rotated secret, a revoked
		// token: every request fails alike. classifyBatch decides between
		// an outage and this message's permanent failure.
		return &authError{msg: msg}
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		var err error = errors.New(msg)
		if refusing(code) {
			err = fmt.Errorf("%s: %w", msg, errRefusing)
		}
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), now); ok {
			return outbox.RetryAfter(fmt.Errorf("%w (Retry-After %s)", err, d), d)
		}
		return err
	default:
		return outbox.Permanent(errors.New(msg))
	}
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(365*24*time.Hour/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
