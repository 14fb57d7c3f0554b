package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names (https://www.standardwebhooks.com).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a Standard Webhooks secret: "whsec_" + base64 of the
// key bytes.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a webhook-timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// Verification errors. Test with errors.Is.
var (
	// ErrMissingHeaders: webhook-id, webhook-timestamp or webhook-signature
	// is absent.
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature header")
	// ErrTimestamp: webhook-timestamp is malformed or outside the tolerance
	// (a replay, or a badly skewed clock).
	ErrTimestamp = errors.New("webhook: timestamp outside the tolerance")
	// ErrNoMatch: no v1 signature matches any of the secrets.
	ErrNoMatch = errors.New("webhook: no matching signature")
)

// DecodeSecret returns the HMAC key of a secret: the base64-decoded bytes of
// a "whsec_..." secret, or the secret's own bytes otherwise.
func DecodeSecret(secret string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			// Secrets are often pasted without their padding.
			if key, err2 := base64.RawStdEncoding.DecodeString(strings.TrimRight(rest, "=")); err2 == nil {
				return nonEmpty(key)
			}
			return nil, fmt.Errorf("webhook: secret with the %s prefix is not valid base64", SecretPrefix)
		}
		return nonEmpty(key)
	}
	return nonEmpty([]byte(secret))
}

func nonEmpty(key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, errors.New("webhook: empty secret")
	}
	return key, nil
}

func decodeSecrets(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook: no secret")
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := DecodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err) // never the secret itself
		}
		keys[i] = k
	}
	return keys, nil
}

// sign returns base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
func sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, timestamp, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func signatureHeader(keys [][]byte, id string, timestamp int64, body []byte) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(sign(k, id, timestamp, body))
	}
	return b.String()
}

// Signature returns the webhook-signature header value for a message: one
// "v1,<base64>" entry per secret, space-separated, in the order given.
func Signature(secrets []string, id string, timestamp time.Time, body []byte) (string, error) {
	keys, err := decodeSecrets(secrets)
	if err != nil {
		return "", err
	}
	return signatureHeader(keys, id, timestamp.Unix(), body), nil
}

// Verify checks a received webhook against the receiver's secrets, as a
// consumer of this publisher (or of any Standard Webhooks sender) should
// before trusting the body: webhook-timestamp within tolerance of now
// (tolerance <= 0 means DefaultTolerance), and at least one v1 entry of
// webhook-signature equal, in constant time, to the HMAC under one of the
// secrets. Pass every secret that is valid during a key rotation. body must
// be the raw request body, byte for byte.
func Verify(secrets []string, headers http.Header, body []byte, tolerance time.Duration) error {
	return VerifyAt(time.Now(), secrets, headers, body, tolerance)
}

// VerifyAt is Verify with the receiver's clock given, for tests.
func VerifyAt(now time.Time, secrets []string, headers http.Header, body []byte, tolerance time.Duration) error {
	keys, err := decodeSecrets(secrets)
	if err != nil {
		return err
	}
	id, ts, sigs := headers.Get(HeaderID), headers.Get(HeaderTimestamp), headers.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not unix seconds", ErrTimestamp, ts)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off the receiver's clock (tolerance %s)", ErrTimestamp, d.Round(time.Second), tolerance)
	}
	want := make([][]byte, len(keys))
	for i, k := range keys {
		want[i] = []byte(sign(k, id, t, body))
	}
	for _, entry := range strings.Fields(sigs) {
		sig, ok := strings.CutPrefix(entry, "v1,")
		if !ok {
			continue // another scheme version
		}
		for _, w := range want {
			if subtle.ConstantTimeCompare([]byte(sig), w) == 1 {
				return nil
			}
		}
	}
	return ErrNoMatch
}
