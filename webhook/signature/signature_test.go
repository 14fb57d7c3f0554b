package signature_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/webhook/signature"
)

// The Standard Webhooks specification's example request.
const (
	specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTS     = 1614265330
	specBody   = `{"test": 2432232314}`
	specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func headers(id, ts, sig string) http.Header {
	h := http.Header{}
	h.Set(signature.HeaderID, id)
	h.Set(signature.HeaderTimestamp, ts)
	h.Set(signature.HeaderSignature, sig)
	return h
}

func TestSpecificationVector(t *testing.T) {
	t.Parallel()
	got, err := signature.Sign([]string{specSecret}, specID, time.Unix(specTS, 0), []byte(specBody))
	if err != nil || got != specSig {
		t.Fatalf("Sign = %q, %v; want %q", got, err, specSig)
	}
	now := time.Unix(specTS+10, 0)
	h := headers(specID, strconv.Itoa(specTS), specSig)
	if err := signature.VerifyAt(now, []string{specSecret}, h, []byte(specBody), 0); err != nil {
		t.Fatalf("VerifyAt: %v", err)
	}
	for name, tc := range map[string]struct {
		h    http.Header
		body string
		now  time.Time
		want error
	}{
		"body altered":      {h, specBody + " ", now, signature.ErrNoMatch},
		"id altered":        {headers(specID+"x", strconv.Itoa(specTS), specSig), specBody, now, signature.ErrNoMatch},
		"too late":          {h, specBody, now.Add(time.Hour), signature.ErrTimestamp},
		"bad timestamp":     {headers(specID, "soon", specSig), specBody, now, signature.ErrTimestamp},
		"no signature":      {headers(specID, strconv.Itoa(specTS), ""), specBody, now, signature.ErrMissingHeaders},
		"other scheme only": {headers(specID, strconv.Itoa(specTS), strings.Replace(specSig, "v1,", "v2,", 1)), specBody, now, signature.ErrNoMatch},
	} {
		if err := signature.VerifyAt(tc.now, []string{specSecret}, tc.h, []byte(tc.body), 0); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	unpadded := strings.TrimRight("whsec_"+"cGdvdXRib3gtdGVzdC1zZWNyZXQ=", "=")
	for _, s := range []string{"whsec_cGdvdXRib3gtdGVzdC1zZWNyZXQ=", unpadded, "pgoutbox-test-secret"} {
		k, err := signature.DecodeSecret(s)
		if err != nil || string(k) != "pgoutbox-test-secret" {
			t.Errorf("DecodeSecret(%q) = %q, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "whsec_", "whsec_%%%not-base64"} {
		_, err := signature.DecodeSecret(s)
		if err == nil || (len(s) > 6 && strings.Contains(err.Error(), s[6:])) {
			t.Errorf("DecodeSecret(%q): err = %v, want an error that does not repeat the secret", s, err)
		}
	}
	if _, err := signature.DecodeSecrets(nil); err == nil {
		t.Error("DecodeSecrets(nil): want an error")
	}
	if _, err := signature.DecodeSecrets([]string{"ok", ""}); err == nil || !strings.Contains(err.Error(), "secret 2") {
		t.Errorf("DecodeSecrets with an empty second secret: %v, want it named by position", err)
	}
}

// FuzzVerify checks, for any secret, id, time and body, that what Sign
// produces verifies, that a changed body or signature does not, and that
// arbitrary received headers never panic and never echo the secret. The seed
// corpus is in testdata/fuzz/FuzzVerify; run it longer with
// go test -fuzz FuzzVerify ./webhook/signature.
func FuzzVerify(f *testing.F) {
	f.Add(specSecret, specID, int64(specTS), []byte(specBody), specSig, strconv.Itoa(specTS))
	f.Fuzz(func(t *testing.T, secret, id string, ts int64, body []byte, sigHeader, tsHeader string) {
		ts %= 1 << 40 // keep time arithmetic far from overflow
		now := time.Unix(ts, 0)
		received := headers(id, tsHeader, sigHeader)
		err := signature.VerifyAt(now, []string{secret}, received, body, time.Minute)
		if err != nil && len(secret) >= 12 && strings.Contains(err.Error(), secret) {
			t.Fatalf("error %q repeats the secret", err)
		}
		sig, err := signature.Sign([]string{secret}, id, now, body)
		if err != nil {
			if _, derr := signature.DecodeSecret(secret); derr == nil {
				t.Fatalf("Sign failed on a secret DecodeSecret accepts: %v", err)
			}
			return
		}
		if id == "" || strings.ContainsAny(id, "\r\n") {
			return // no valid webhook-id header to send
		}
		h := headers(id, strconv.FormatInt(ts, 10), sig)
		if err := signature.VerifyAt(now, []string{secret}, h, body, time.Minute); err != nil {
			t.Fatalf("a signed message does not verify: %v", err)
		}
		if err := signature.VerifyAt(now, []string{secret}, h, append(bytes.Clone(body), 'x'), time.Minute); !errors.Is(err, signature.ErrNoMatch) {
			t.Fatalf("a changed body: err = %v, want ErrNoMatch", err)
		}
		h.Set(signature.HeaderSignature, "v1,"+strings.Repeat("A", 44))
		if err := signature.VerifyAt(now, []string{secret}, h, body, time.Minute); !errors.Is(err, signature.ErrNoMatch) {
			t.Fatalf("a forged signature: err = %v, want ErrNoMatch", err)
		}
	})
}

// A receiver checks the signature before trusting the body. This is the
// Standard Webhooks specification's example request.
func ExampleVerifyAt() {
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	received := time.Unix(1614265330, 0).Add(3 * time.Second)

	fmt.Println(signature.VerifyAt(received, secrets, h, body, 5*time.Minute))
	fmt.Println(signature.VerifyAt(received, secrets, h, []byte(`{"test": 1}`), 5*time.Minute))
	fmt.Println(signature.VerifyAt(received.Add(time.Hour), secrets, h, body, 5*time.Minute))
	// Output:
	// <nil>
	// webhook: no matching signature
	// webhook: timestamp outside the tolerance: 1h0m3s off the receiver's clock (tolerance 5m0s)
}
