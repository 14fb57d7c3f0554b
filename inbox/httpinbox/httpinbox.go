package httpinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
	"github.com/pgoutbox/outbox/webhook/signature"
)

// DefaultMaxBodyBytes matches the webhook publisher's default limit
// (webhook.DefaultMaxBodyBytes, 1 MiB).
const DefaultMaxBodyBytes = 1 << 20

// Config configures a Handler. Zero values mean the documented defaults;
// New rejects invalid values with an *outboxtype.ConfigError naming the
// field.
type Config struct {
	// Secrets verify the signature: "whsec_<base64>" or raw key bytes, as the
	// sender has them. Give both during a key rotation. Required.
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from this server's clock;
	// older requests are refused as replays. Defaults to
	// signature.DefaultTolerance (5m).
	Tolerance time.Duration
	// MaxBodyBytes is the largest body accepted. Defaults to
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Logger receives a line per refused request and per failed handler
	// (event_id, remote_addr). Defaults to
	// discarding them.
	Logger *slog.Logger
}

// Handler is an http.Handler feeding verified webhooks to an
// inbox.Processor. It is safe for concurrent use.
type Handler struct {
	proc inbox.Processor
	cfg  Config
	log  *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

// bad returns the *outboxtype.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outboxtype.ConfigError{Config: "httpinbox.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// New validates cfg and returns a Handler processing events with proc.
func New(proc inbox.Processor, cfg Config) (*Handler, error) {
	if proc == nil {
		return nil, errors.New("httpinbox: New: processor is nil")
	}
	if len(cfg.Secrets) == 0 {
		return nil, bad("Secrets", "at least one secret is required")
	}
	for i, s := range cfg.Secrets {
		if _, err := signature.DecodeSecret(s); err != nil {
			return nil, bad("Secrets", "secret %d: %w", i+1, err) // never the secret itself
		}
	}
	cfg.Tolerance = cmp.Or(cfg.Tolerance, signature.DefaultTolerance)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	switch {
	case cfg.Tolerance < 0:
		return nil, bad("Tolerance", "%s must not be negative", cfg.Tolerance)
	case cfg.MaxBodyBytes < 0:
		return nil, bad("MaxBodyBytes", "%d must not be negative", cfg.MaxBodyBytes)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Handler{proc: proc, cfg: cfg, log: log}, nil
}

// ToMessage builds the inbox.Message a handler sees from a verified request:
// what the signature covers and nothing else. ID is webhook-id (the outbox
// event id), Payload is the body, and Headers holds webhook-id and
// webhook-timestamp. EventType, AggregateType, AggregateID and CreatedAt stay
// zero: the webhook publisher sends them as outbox-* headers the signature
// does not cover, and anyone on the path could rewrite them without breaking
// the signature. Read them from the payload, or, knowing they are
// unauthenticated, from UnsignedHeader. An outbox-event-id header that
// disagrees with webhook-id marks a broken sender; the error wraps
// inbox.ErrInvalidMessage, as does a webhook-id that is not a UUID.
//
// A structured CloudEvent (Content-Type application/cloudevents+json, a
// relay with the cloudevents-structured envelope) is signed whole, so its
// attributes are trusted: the Message is inbox.MessageFromCloudEvent's,
// Payload its data, and its id must be webhook-id. In binary mode the ce-
// headers are not signed: they are treated as the outbox-* headers are
// (ce-id must agree with webhook-id; the others are in UnsignedHeader).
func ToMessage(header http.Header, body []byte) (inbox.Message, error) {
	wid := header.Get(signature.HeaderID)
	for _, name := range []string{outboxtype.HeaderEventID, outboxtype.CloudEventsHeaderPrefix + "id"} {
		if oid := header.Get(name); oid != "" && !sameUUID(oid, wid) {
			return inbox.Message{}, fmt.Errorf("httpinbox: %s %.64q and %s %.64q disagree: %w",
				signature.HeaderID, wid, name, oid, inbox.ErrInvalidMessage)
		}
	}
	if ct := header.Get("Content-Type"); strings.HasPrefix(ct, outboxtype.CloudEventsJSON) {
		ce, err := outboxtype.ReadCloudEvent(map[string]string{"content-type": ct}, body)
		if err != nil || ce == nil {
			return inbox.Message{}, fmt.Errorf("httpinbox: a %s body that is no CloudEvent: %v: %w", ct, err, inbox.ErrInvalidMessage)
		}
		if !sameUUID(ce.ID, wid) {
			return inbox.Message{}, fmt.Errorf("httpinbox: %s %.64q and the CloudEvent's id %.64q disagree: %w",
				signature.HeaderID, wid, ce.ID, inbox.ErrInvalidMessage)
		}
		return inbox.MessageFromCloudEvent(ce, map[string]string{
			signature.HeaderID: wid, signature.HeaderTimestamp: header.Get(signature.HeaderTimestamp),
		})
	}
	id, err := uuid.Parse(wid)
	if err != nil || id == uuid.Nil {
		return inbox.Message{}, fmt.Errorf("httpinbox: %s %.64q is not a UUID: %w", signature.HeaderID, wid, inbox.ErrInvalidMessage)
	}
	return inbox.Message{
		ID:      id,
		Payload: body,
		Headers: map[string]string{
			signature.HeaderID:        wid,
			signature.HeaderTimestamp: header.Get(signature.HeaderTimestamp),
		},
	}, nil
}

type unsignedKey struct{}

// UnsignedHeader returns the headers of the request being handled that the
// signature does not cover, for a handler run by a Handler: the outbox-*
// metadata (outbox-event-type, outbox-aggregate-type, outbox-aggregate-id,
// outbox-created-at), the row's own headers (Outbox-Header-<name>) and
// whatever else the request carried. They are NOT authenticated: a proxy or
// anyone who captured a signed request can change them and the signature
// still verifies. Use them for logs and metrics, never to decide what to
// write. It returns nil outside a Handler.
func UnsignedHeader(ctx context.Context) http.Header {
	h, _ := ctx.Value(unsignedKey{}).(http.Header)
	return h
}

func sameUUID(a, b string) bool {
	ua, errA := uuid.Parse(a)
	ub, errB := uuid.Parse(b)
	return errA == nil && errB == nil && ua == ub
}

// ServeHTTP verifies, processes and answers, as the package documents.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, "body too large", err)
			return
		}
		h.refuse(w, r, http.StatusBadRequest, "could not read the body", err)
		return
	}
	// Nothing about the request is trusted, or even parsed, before this.
	if err := signature.Verify(h.cfg.Secrets, r.Header, body, h.cfg.Tolerance); err != nil {
		h.refuse(w, r, http.StatusUnauthorized, "invalid webhook signature", err)
		return
	}
	msg, err := ToMessage(r.Header, body)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, "malformed event", err)
		return
	}
	ctx := context.WithValue(r.Context(), unsignedKey{}, unsigned(r.Header))
	// The trace context is unsigned too; it only links spans, so it is
	// handed on, for an inbox.Tracer to continue (inboxotel).
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := rowHeader(r.Header, k); v != "" {
			msg.Headers[k] = v
		}
	}
	res, err := h.proc(ctx, msg)
	if err != nil {
		if errors.Is(err, inbox.ErrInvalidMessage) {
			h.refuse(w, r, http.StatusBadRequest, "malformed event", err)
			return
		}
		h.log.LogAttrs(r.Context(), slog.LevelWarn, "httpinbox: handler failed; the sender will retry",
			slog.String("event_id", msg.ID.String()), slog.String("remote_addr", r.RemoteAddr), slog.Any("err", err))
		// The error text stays in the log: it may describe the database.
		http.Error(w, "event not processed, retry later", http.StatusInternalServerError)
		return
	}
	if res.Duplicate {
		w.Header().Set("Inbox-Duplicate", "true")
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, code int, text string, err error) {
	h.log.LogAttrs(r.Context(), slog.LevelWarn, "httpinbox: refused request",
		slog.Int("status", code), slog.String("remote_addr", r.RemoteAddr), slog.Any("err", err))
	http.Error(w, text, code)
}

// unsigned copies every header but the three the signature is made of.
func unsigned(h http.Header) http.Header {
	out := h.Clone()
	for _, k := range []string{signature.HeaderID, signature.HeaderTimestamp, signature.HeaderSignature} {
		out.Del(k)
	}
	return out
}

// rowHeader reads a header the webhook publisher sends among the row's
// headers (Outbox-Header-Traceparent), or else the plain header (a
// traceparent a traced HTTP client sets).
func rowHeader(h http.Header, key string) string {
	if v := h.Get(outboxtype.WebhookHeaderPrefix + key); v != "" {
		return v
	}
	if v := h.Get(outboxtype.CloudEventsHeaderPrefix + key); v != "" {
		return v // binary CloudEvents: the Distributed Tracing extension
	}
	return h.Get(key)
}
