// Package signature signs and verifies Standard Webhooks requests
// (https://www.standardwebhooks.com): the scheme package webhook's publisher
// signs with and the one a receiver checks before trusting a body.
//
// A receiver imports this package alone: it uses only the standard library,
// so checking a signature links nothing of the relay or its publishers.
//
//	func handle(w http.ResponseWriter, r *http.Request) {
//		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//		if err != nil {
//			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
//			return
//		}
//		if err := signature.Verify(secrets, r.Header, body, 5*time.Minute); err != nil {
//			http.Error(w, "bad signature", http.StatusUnauthorized)
//			return
//		}
//		// deduplicate on r.Header.Get(signature.HeaderID), then process body
//	}
//
// The signature covers webhook-id, webhook-timestamp and the body: an
// HMAC-SHA256 of "id.timestamp.body" under each secret, base64-encoded, sent
// as "v1,<signature>" entries. inbox/httpinbox does all of this, and the
// deduplication, for you.
package signature

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

// Standard Webhooks header names.
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
// a "whsec_..." secret, or the secret's own bytes otherwise. Its errors never
// contain the secret.
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

// DecodeSecrets decodes each secret with DecodeSecret, for a sender that
// signs many messages with the same secrets (SignKeys). An error names the
// secret by its position, never by its value.
func DecodeSecrets(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook: no secret")
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := DecodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
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

// SignKeys returns the webhook-signature header value for a message signed
// at timestamp (unix seconds) with keys from DecodeSecrets: one
// "v1,<base64>" entry per key, space-separated, in the order given.
func SignKeys(keys [][]byte, id string, timestamp int64, body []byte) string {
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

// Sign returns the webhook-signature header value for a message: one
// "v1,<base64>" entry per secret, space-separated, in the order given.
func Sign(secrets []string, id string, timestamp time.Time, body []byte) (string, error) {
	keys, err := DecodeSecrets(secrets)
	if err != nil {
		return "", err
	}
	return SignKeys(keys, id, timestamp.Unix(), body), nil
}

// Verify checks a received webhook against the receiver's secrets before the
// body is trusted: webhook-timestamp within tolerance of now (tolerance <= 0
// means DefaultTolerance), and at least one v1 entry of webhook-signature
// equal, in constant time, to the HMAC under one of the secrets. Pass every
// secret that is valid during a key rotation. body must be the raw request
// body, byte for byte.
func Verify(secrets []string, headers http.Header, body []byte, tolerance time.Duration) error {
	return VerifyAt(time.Now(), secrets, headers, body, tolerance)
}

// VerifyAt is Verify with the receiver's clock given, for tests.
func VerifyAt(now time.Time, secrets []string, headers http.Header, body []byte, tolerance time.Duration) error {
	keys, err := DecodeSecrets(secrets)
	if err != nil {
		return err
	}
	id, ts, sigs := headers.Get(HeaderID), headers.Get(HeaderTimestamp), headers.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %.32q is not unix seconds", ErrTimestamp, ts)
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
