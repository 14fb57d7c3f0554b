package webhook

import (
	"net/http"
	"time"

	"github.com/pgoutbox/outbox/webhook/signature"
)

// The signing scheme lives in package webhook/signature, which receivers
// import alone (it links nothing of the publisher); these forward to it.

// Standard Webhooks header names (https://www.standardwebhooks.com).
const (
	HeaderID        = signature.HeaderID
	HeaderTimestamp = signature.HeaderTimestamp
	HeaderSignature = signature.HeaderSignature
)

// SecretPrefix marks a Standard Webhooks secret: "whsec_" + base64 of the
// key bytes.
const SecretPrefix = signature.SecretPrefix

// DefaultTolerance is how far a webhook-timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = signature.DefaultTolerance

// Verification errors, signature's. Test with errors.Is.
var (
	ErrMissingHeaders = signature.ErrMissingHeaders
	ErrTimestamp      = signature.ErrTimestamp
	ErrNoMatch        = signature.ErrNoMatch
)

// DecodeSecret is signature.DecodeSecret.
func DecodeSecret(secret string) ([]byte, error) { return signature.DecodeSecret(secret) }

func decodeSecrets(secrets []string) ([][]byte, error) { return signature.DecodeSecrets(secrets) }

func signatureHeader(keys [][]byte, id string, timestamp int64, body []byte) string {
	return signature.SignKeys(keys, id, timestamp, body)
}

// Signature returns the webhook-signature header value for a message: one
// "v1,<base64>" entry per secret, space-separated, in the order given
// (signature.Sign).
func Signature(secrets []string, id string, timestamp time.Time, body []byte) (string, error) {
	return signature.Sign(secrets, id, timestamp, body)
}

// Verify is signature.Verify. A receiver should import webhook/signature
// instead, which links none of the publisher.
func Verify(secrets []string, headers http.Header, body []byte, tolerance time.Duration) error {
	return signature.Verify(secrets, headers, body, tolerance)
}

// VerifyAt is signature.VerifyAt.
func VerifyAt(now time.Time, secrets []string, headers http.Header, body []byte, tolerance time.Duration) error {
	return signature.VerifyAt(now, secrets, headers, body, tolerance)
}
