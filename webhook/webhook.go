package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults for Config's zero values.
const (
	// DefaultTimeout bounds one request.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxBodyBytes matches common receivers' request limits (nginx's
	// client_max_body_size is 1m by default).
	DefaultMaxBodyBytes = 1 << 20
	DefaultConcurrency  = 8
	DefaultUserAgent    = "pgoutbox-webhook/1"
	// MinSecretBytes is the shortest HMAC key New accepts, decoded: a
	// "whsec_" secret's key or a raw secret. Standard Webhooks advises 24
	// to 64 bytes; "openssl rand -base64 32" after "whsec_" makes one.
	MinSecretBytes = 16
)

// HeaderRowPrefix prefixes the row's own headers (outbox.Message.Headers)
// on the request: a row header "tenant" arrives as "Outbox-Header-Tenant".
// The prefix keeps them from colliding with HTTP's own headers and with the
// signature headers.
const HeaderRowPrefix = "outbox-header-"

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// URL is the endpoint, or a template over the event with
	// outbox.ParseTopicTemplate's placeholders, each value percent-encoded:
	// "https://hooks.example.com/outbox/{event_type}". http and https only.
	// Required.
	URL string
	// Secrets sign every request, one webhook-signature entry per secret:
	// "whsec_<base64>" (Standard Webhooks) or raw key bytes, each key at
	// least MinSecretBytes long. Give two during a key rotation. Required.
	Secrets []string
	// Timeout bounds one request, connection included. Defaults to
	// DefaultTimeout (10s).
	Timeout time.Duration
	// MaxBodyBytes is the largest payload sent; larger ones fail permanently
	// without a request. Defaults to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int
	// Concurrency is how many requests one PublishBatch has in flight.
	// Defaults to DefaultConcurrency (8).
	Concurrency int
	// AllowPrivateNetworks lets the publisher reach loopback, private,
	// link-local and other non-public addresses. Off by default: the target
	// address is checked when each connection is dialled.
	AllowPrivateNetworks bool
	// Header is sent with every request (an Authorization for the receiver,
	// say). Never logged or put in errors. It cannot set the signature,
	// content-type or outbox headers.
	Header http.Header
	// TLSConfig is the client's TLS configuration (private CAs, client
	// certificates); nil means Go's defaults.
	TLSConfig *tls.Config
	// UserAgent is the User-Agent header. Defaults to DefaultUserAgent
	// ("pgoutbox-webhook/1").
	UserAgent string
}

// Publisher is an outbox.BatchPublisher that POSTs each event to an HTTP
// endpoint. It is safe for concurrent use.
type Publisher struct {
	url          *outbox.TopicTemplate
	keys         [][]byte
	timeout      time.Duration
	maxBody      int
	concurrency  int
	allowPrivate bool
	header       http.Header
	userAgent    string
	client       *http.Client
	transport    *http.Transport
	// hostVaries: Config.URL's host has a placeholder, so a refused address
	// is one event's, not the configuration's.
	hostVaries bool
	// refused is the last SSRF refusal of the configured host, until an
	// endpoint answers again: Health reports it.
	refused atomic.Pointer[error]

	// dialGuard, when set (by tests), vets every dial after the SSRF policy.
	dialGuard func(netip.AddrPort) error
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
)

// New validates cfg and returns a Publisher. It sends no request.
func New(cfg Config) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, bad("URL", "required")
	}
	tmpl, err := outbox.ParseTopicTemplate(cfg.URL)
	if err != nil {
		return nil, bad("URL", "%w", err)
	}
	probe, err := checkURL(tmpl.Render(&outbox.Message{EventType: "x", AggregateType: "x", AggregateID: "x"}))
	if err != nil {
		return nil, bad("URL", "%w", err)
	}
	other, _ := url.Parse(tmpl.Render(&outbox.Message{EventType: "y", AggregateType: "y", AggregateID: "y"}))
	keys, err := decodeSecrets(cfg.Secrets)
	if err != nil {
		return nil, bad("Secrets", "%w", err)
	}
	for i, k := range keys {
		if err := checkKey(cfg.Secrets[i], k); err != nil {
			return nil, bad("Secrets", "secret %d: %w", i+1, err) // never the secret itself
		}
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.UserAgent = cmp.Or(cfg.UserAgent, DefaultUserAgent)
	switch {
	case cfg.Timeout < time.Millisecond:
		return nil, bad("Timeout", "%s: must be at least 1ms", cfg.Timeout)
	case cfg.MaxBodyBytes < 1:
		return nil, bad("MaxBodyBytes", "%d: must be positive", cfg.MaxBodyBytes)
	case cfg.Concurrency < 1 || cfg.Concurrency > 256:
		return nil, bad("Concurrency", "%d: must be between 1 and 256", cfg.Concurrency)
	}
	for k, vs := range cfg.Header {
		if reservedHeader(k) {
			return nil, bad("Header", "%q is set by the publisher", k)
		}
		if !validHeaderName(k) {
			return nil, bad("Header", "%q is not a valid header name", k)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return nil, bad("Header", "%q has an invalid value", k) // not the value: it may be a credential
			}
		}
	}
	p := &Publisher{
		url: tmpl, keys: keys, timeout: cfg.Timeout, maxBody: cfg.MaxBodyBytes, concurrency: cfg.Concurrency,
		allowPrivate: cfg.AllowPrivateNetworks, header: cfg.Header.Clone(), userAgent: cfg.UserAgent,
		hostVaries: other == nil || other.Host != probe.Host,
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, Control: p.control}
	p.transport = &http.Transport{
		// No proxy: the SSRF check judges the address dialled, which would
		// be the proxy's.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       cfg.TLSConfig,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   cfg.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	p.client = &http.Client{
		Transport: p.transport,
		// A redirect is not followed: it is reported, permanently. A
		// receiver that moved must be reconfigured, and following it could
		// lead the signed event somewhere unintended.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "webhook.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// checkKey refuses a key too short to be a secret: most often a value that
// was meant to be a "whsec_..." secret and is not, such as a placeholder.
func checkKey(secret string, key []byte) error {
	if len(key) >= MinSecretBytes {
		return nil
	}
	if strings.HasPrefix(secret, SecretPrefix) {
		return fmt.Errorf("its key is %d bytes, want at least %d (%q followed by the base64 of the key, e.g. of openssl rand -base64 32)",
			len(key), MinSecretBytes, SecretPrefix)
	}
	return fmt.Errorf("%d bytes and no %q prefix: want a Standard Webhooks secret, %q followed by the base64 of a key of at least %d bytes, or a raw key of at least %d bytes",
		len(key), SecretPrefix, SecretPrefix, MinSecretBytes, MinSecretBytes)
}

// reservedHeader reports the headers the publisher sets itself.
func reservedHeader(k string) bool {
	k = strings.ToLower(k)
	switch k {
	case HeaderID, HeaderTimestamp, HeaderSignature, "idempotency-key", "content-type", "content-length", "host", "user-agent",
		"transfer-encoding", "connection":
		return true
	}
	return strings.HasPrefix(k, "outbox-")
}

// checkURL parses a rendered target URL.
func checkURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	if u.User != nil {
		return nil, errors.New("credentials in the URL are not supported; use Config.Header")
	}
	return u, nil
}

// Health implements outbox.HealthChecker: it reports the SSRF policy's
// refusal of the configured endpoint's address, which names the option that
// allows it, until an endpoint answers again. Otherwise nil: it sends no
// request of its own.
func (p *Publisher) Health(context.Context) error {
	if err := p.refused.Load(); err != nil {
		return *err
	}
	return nil
}

// Close closes idle connections.
func (p *Publisher) Close() { p.transport.CloseIdleConnections() }

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "webhook" }

// Destination implements outbox.Describer: the endpoint's scheme and host
// (its path and query often carry tokens, which spans must not record).
func (p *Publisher) Destination(msg *outbox.Message) string {
	u, err := url.Parse(p.URL(msg))
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// URL returns the endpoint msg is posted to.
func (p *Publisher) URL(msg *outbox.Message) string {
	esc := *msg
	esc.EventType = escape(msg.EventType)
	esc.AggregateType = escape(msg.AggregateType)
	esc.AggregateID = escape(msg.AggregateID)
	return p.url.Render(&esc)
}

// escape percent-encodes all but RFC 3986's unreserved characters, so a
// value stays one path segment or one query value wherever the template
// puts it.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// redact names a target without its path and query, which often carry
// tokens (https://hooks.slack.com/services/T0/B0/XXXX).
func redact(u *url.URL) string {
	if u.Path == "" || u.Path == "/" {
		return u.Scheme + "://" + u.Host + "/"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// Request returns the signed HTTP request msg becomes, signed at now.
func (p *Publisher) Request(ctx context.Context, msg *outbox.Message, now time.Time) (*http.Request, error) {
	u, err := checkURL(p.URL(msg))
	if err != nil {
		return nil, outbox.Permanent(fmt.Errorf("webhook: URL from template: %w", err))
	}
	body, contentType := msg.Payload, "application/json"
	var ce *outboxtype.CloudEvent
	switch msg.Envelope {
	case outbox.EnvelopeCloudEvents:
		if ce, err = msg.CloudEvent(); err != nil {
			return nil, outbox.Permanent(fmt.Errorf("webhook: %w", err))
		}
		contentType = ce.DataContentType
	case outbox.EnvelopeCloudEventsStructured:
		if body, err = msg.StructuredCloudEvent(); err != nil {
			return nil, outbox.Permanent(fmt.Errorf("webhook: %w", err))
		}
		contentType = outboxtype.CloudEventsJSON
	}
	if len(body) > p.maxBody {
		return nil, outbox.Permanent(fmt.Errorf("webhook: body of %d bytes exceeds MaxBodyBytes %d", len(body), p.maxBody))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, outbox.Permanent(fmt.Errorf("webhook: request to %s: %w", redact(u), err))
	}
	for k, vs := range p.header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	id := msg.ID.String()
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", p.userAgent)
	req.Header.Set(HeaderID, id)
	// The same on every attempt. Besides telling receivers that follow the
	// IETF Idempotency-Key draft how to deduplicate, it makes the request
	// replayable for net/http, which then retries it by itself when a
	// pooled keep-alive connection turns out to be dead before anything
	// was sent.
	req.Header.Set("Idempotency-Key", id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, signatureHeader(p.keys, id, now.Unix(), body))
	if msg.Envelope.CloudEvents() {
		// The CloudEvents attributes stand for the outbox-* headers; the
		// structured body carries them itself.
		if ce != nil {
			for _, a := range ce.Attributes() {
				req.Header.Set(HeaderCloudEventsPrefix+a.Name, outboxtype.EncodeHeaderValue(a.Value))
			}
		}
		return req, nil
	}
	std := map[string]bool{outbox.HeaderEventID: true, outbox.HeaderEventType: true, outbox.HeaderAggregateType: true,
		outbox.HeaderAggregateID: true, outbox.HeaderCreatedAt: true}
	for k, v := range msg.StandardHeaders() {
		name := k
		if !std[k] {
			name = HeaderRowPrefix + k
		}
		if !validHeaderName(name) || !validHeaderValue(v) {
			return nil, outbox.Permanent(fmt.Errorf("webhook: header %q cannot be sent over HTTP (invalid name or value)", k))
		}
		req.Header.Set(name, v)
	}
	return req, nil
}

// HeaderCloudEventsPrefix prefixes the CloudEvents attributes' headers in
// binary content mode (the HTTP protocol binding): ce-id, ce-type...
const HeaderCloudEventsPrefix = outboxtype.CloudEventsHeaderPrefix

// Publish posts msg and waits for a 2xx answer.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// PublishBatch posts the messages, Concurrency at a time. One aggregate's
// messages are posted one after another in batch order, and once one fails
// the later ones of that aggregate are not sent in this batch (they fail
// with the same class), so a receiver sees an aggregate's events in order
// unless the relay retries.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	lanes := make([][]int, min(p.concurrency, len(msgs)))
	for i, m := range msgs {
		h := fnv.New32a()
		h.Write([]byte(m.AggregateType))
		h.Write([]byte{0})
		h.Write([]byte(m.AggregateID))
		n := h.Sum32() % uint32(len(lanes))
		lanes[n] = append(lanes[n], i)
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Go(func() {
			failed := map[string]error{}
			for _, i := range lane {
				m := msgs[i]
				key := m.AggregateType + "\x00" + m.AggregateID
				if prev, ok := failed[key]; ok {
					errs[i] = blocked(m.AggregateID, prev)
					continue
				}
				if err := p.post(ctx, m); err != nil {
					errs[i] = err
					failed[key] = err
				}
			}
		})
	}
	wg.Wait()
	return classifyBatch(errs)
}

// post sends one request and classifies its outcome.
func (p *Publisher) post(ctx context.Context, msg *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("webhook: not sent: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := p.Request(rctx, msg, time.Now())
	if err != nil {
		return err
	}
	target := redact(req.URL)
	resp, err := p.client.Do(req)
	if err != nil {
		err = fmt.Errorf("webhook: POST %s: %w", target, scrub(err))
		switch {
		case errors.Is(err, ErrBlockedAddress) && p.hostVaries:
			return outbox.Permanent(err) // this event's host
		case errors.Is(err, ErrBlockedAddress):
			// The configured host: every event would be refused alike. An
			// outage keeps them (no attempt counted) until the
			// configuration allows the address.
			p.refused.Store(&err)
			return outbox.Unavailable(err)
		case outbox.Classify(err) == outbox.ClassUnavailable:
			return outbox.Unavailable(err) // refused, reset, DNS failure
		}
		return err
	}
	defer resp.Body.Close()
	p.refused.Store(nil)
	// Read a little of the answer for the error message, and drain some
	// more so the connection can be reused.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return statusError(resp, target, snippet, time.Now())
}

// scrub drops the *url.Error layer, whose text repeats the full URL (path
// and query may carry tokens), keeping the cause.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// printable returns s's first line-ish text, for an error message.
func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), "?"))
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// validHeaderName reports an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue refuses control characters (CR and LF above all) other
// than horizontal tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
