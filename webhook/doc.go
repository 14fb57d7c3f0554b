// Package webhook publishes outbox events as signed HTTP POSTs, following
// the Standard Webhooks specification (https://www.standardwebhooks.com),
// with nothing but net/http.
//
// # Contract
//
// A message counts as published when the endpoint answers 2xx. Each event is
// one request:
//
//   - POST to Config.URL, a static URL or a template over the event
//     ("https://hooks.example.com/outbox/{event_type}"); the values are
//     percent-encoded, so each stays within its path segment or query value;
//   - body: the payload, byte for byte; Content-Type: application/json;
//   - webhook-id: the event id, the same on every retry, so receivers
//     deduplicate on it; also sent as Idempotency-Key, which lets net/http
//     replay the request on a keep-alive connection found dead;
//   - webhook-timestamp: the unix seconds of this attempt;
//   - webhook-signature: "v1,<base64(HMAC-SHA256(key, id.timestamp.body))>",
//     one entry per Config.Secrets, space-separated: give two secrets during
//     a key rotation. Secrets are "whsec_<base64 key>" as the specification
//     has it; any other string is used as raw key bytes. New refuses a key
//     shorter than MinSecretBytes (16), decoded: "foo" is a placeholder,
//     not a secret;
//   - the standard outbox headers (outbox-event-id, outbox-event-type,
//     outbox-aggregate-type, outbox-aggregate-id, outbox-created-at) as HTTP
//     headers of those names, and the row's own headers prefixed with
//     outbox-header- (HeaderRowPrefix): "tenant" arrives as
//     Outbox-Header-Tenant. HTTP header names are case-insensitive, so
//     receivers should lowercase them. A header that HTTP cannot carry (a
//     newline in a value, a space in a name) fails the event permanently;
//   - Config.Header (an Authorization for the receiver, say) on every request.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the request
// follows the CloudEvents HTTP protocol binding, beside the Standard
// Webhooks headers, which stay as above (webhook-id is the event id, the
// signature covers the body sent):
//
//   - outbox.EnvelopeCloudEvents (binary content mode): body = the
//     payload, Content-Type: application/json (datacontenttype); one header
//     per attribute, ce-specversion, ce-id, ce-source, ce-type, ce-subject
//     (aggregate id), ce-time (created_at) and ce-<extension> for the
//     aggregate type and the row's headers, values percent-encoded as the
//     binding asks;
//   - outbox.EnvelopeCloudEventsStructured: body = the JSON event format,
//     Content-Type: application/cloudevents+json.
//
// The outbox-* headers are not sent then: the attributes carry the same.
// docs/CLOUDEVENTS.md has every broker's mapping.
//
// PublishBatch sends Concurrency requests at a time. One aggregate's events
// go one after another in batch order, and once one fails the rest of that
// aggregate's events in the batch are not sent, so a receiver sees an
// aggregate's events in order except across relay retries.
//
// The signature covers webhook-id, webhook-timestamp and the body only: the
// outbox-* headers are not signed, so a receiver must deduplicate on the signed
// webhook-id (which is the event id), as inbox/httpinbox does.
//
// Receivers check requests with package webhook/signature's Verify
// (constant-time comparison, timestamp tolerance, any of several secrets)
// before trusting a body; it uses only the standard library. This package's
// Verify forwards to it.
//
// # Errors
//
//	2xx                                              → published
//	3xx (never followed; the error names Location)   → outbox.Permanent
//	other 4xx (400, 404, 410, 413, 422…)             → outbox.Permanent
//	401, 403                                         → outbox.Unavailable when no
//	                                                   request of the batch got
//	                                                   through (a skewed clock, a
//	                                                   rotated secret: every
//	                                                   request fails alike);
//	                                                   permanent otherwise
//	429, 502, 503, 504                               → outbox.Unavailable when no
//	                                                   request of the batch got
//	                                                   through; transient otherwise
//	408, 500, other 5xx                              → transient
//	payload over MaxBodyBytes, bad rendered URL,
//	a host taken from the event (a placeholder in
//	the URL's host) refused by the SSRF policy       → outbox.Permanent
//	the configured endpoint refused by the SSRF
//	policy (every event would be)                    → outbox.Unavailable,
//	                                                   and Health reports it
//	connection refused or reset, DNS failure         → outbox.Unavailable
//	timeouts and dropped connections, when no
//	request of the batch got an answer               → outbox.Unavailable
//	a timeout while other requests succeeded         → transient
//
// A transient or refusing answer with a Retry-After (seconds or an HTTP
// date) is an *outbox.RetryAfterError: the relay waits at least that long.
// An event not sent because an earlier event of its aggregate failed in the
// batch takes that failure's class, except permanent (it was never judged):
// then it is transient. "No request of the batch got through" is
// outbox.ClassifyBatch's rule: one accepted request shows the endpoint is
// answering, and the failures are the messages' own.
//
// Error texts name the endpoint by scheme and host only: webhook URL paths
// and queries often carry tokens. Config.Header values and secrets never
// appear in errors.
//
// # SSRF protection
//
// By default the publisher refuses to connect to loopback, private (RFC 1918,
// fc00::/7), link-local (including the cloud metadata service at
// 169.254.169.254), unspecified, multicast, carrier-grade NAT (100.64.0.0/10)
// and other reserved addresses, IPv4-mapped IPv6 forms included. The check
// runs in the dialer's Control hook, on the resolved address of every
// connection and before any packet is sent, so a hostname that resolves (or
// re-resolves: DNS rebinding) to such an address is refused too. Environment
// proxies (HTTP_PROXY) are not used, since the check would then judge the
// proxy. Set Config.AllowPrivateNetworks to deliver to internal services
// (outbox_allow_private_networks=true in a broker URL). A refused endpoint
// is a configuration error: the relay keeps the backlog, counts no attempt
// and is not ready, and the error names that option.
//
// # Usage
//
//	pub, err := webhook.New(webhook.Config{
//		URL:     "https://hooks.example.com/outbox/{event_type}",
//		Secrets: []string{os.Getenv("WEBHOOK_SECRET")}, // whsec_...
//	})
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// A receiver:
//
//	func handle(w http.ResponseWriter, r *http.Request) {
//		body, _ := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//		if err := signature.Verify(secrets, r.Header, body, 5*time.Minute); err != nil {
//			http.Error(w, "bad signature", http.StatusUnauthorized)
//			return
//		}
//		// deduplicate on r.Header.Get("webhook-id"), then process body
//	}
//
// From the command line, NewFromURL takes the endpoint itself, with options
// as outbox_-prefixed query parameters and the secrets in an environment
// variable (OUTBOX_WEBHOOK_SECRET by default):
//
//	https://hooks.example.com/outbox/{event_type}?outbox_timeout=5s
package webhook
