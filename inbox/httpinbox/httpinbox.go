package httpinbox

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/webhook"
)

// DefaultMaxBodyBytes matches the webhook publisher's default limit.
const DefaultMaxBodyBytes = webhook.DefaultMaxBodyBytes

// Config configures a Handler. Zero values mean the documented defaults.
type Config struct {
	// Secrets verify the signature: "whsec_<base64>" or raw key bytes, as the
	// sender has them. Give both during a key rotation. Required.
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from this server's clock;
	// older requests are refused as replays. Default 5 minutes
	// (webhook.DefaultTolerance).
	Tolerance time.Duration
	// MaxBodyBytes is the largest body accepted. Default 1 MiB.
	MaxBodyBytes int64
	// Logger receives a line per refused request and per failed handler
	// (event_id, event_type, aggregate_id, remote_addr). Default: discard.
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

// New validates cfg and returns a Handler processing events with proc.
func New(proc inbox.Processor, cfg Config) (*Handler, error) {
	if proc == nil {
		return nil, errors.New("httpinbox: New: processor is nil")
	}
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("httpinbox: Config.Secrets: at least one secret is required")
	}
	for i, s := range cfg.Secrets {
		if _, err := webhook.DecodeSecret(s); err != nil {
			return nil, fmt.Errorf("httpinbox: Config.Secrets[%d]: %w", i, err) // never the secret itself
		}
	}
	if cfg.Tolerance < 0 {
		return nil, fmt.Errorf("httpinbox: Config.Tolerance: %s must not be negative", cfg.Tolerance)
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = webhook.DefaultTolerance
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("httpinbox: Config.MaxBodyBytes: %d must not be negative", cfg.MaxBodyBytes)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Handler{proc: proc, cfg: cfg, log: log}, nil
}

// ToMessage builds an inbox.Message from a verified request's headers (keys
// lowercased, first value of each) and body. The event id is webhook-id; an
// outbox-event-id header, if present, must agree with it. An error wraps
// inbox.ErrInvalidMessage.
func ToMessage(header http.Header, body []byte) (inbox.Message, error) {
	h := make(map[string]string, len(header))
	for k, vs := range header {
		if len(vs) > 0 {
			h[strings.ToLower(k)] = vs[0]
		}
	}
	// The webhook publisher sends the row's own headers (trace context
	// included) as Outbox-Header-<name>: give them back their names, without
	// overriding a header the request carries under that name.
	for k, v := range h {
		if name, ok := strings.CutPrefix(k, "outbox-header-"); ok && name != "" {
			if _, taken := h[name]; !taken {
				h[name] = v
			}
		}
	}
	wid := h[webhook.HeaderID]
	if oid, ok := h[outbox.HeaderEventID]; ok && !sameUUID(oid, wid) {
		return inbox.Message{}, fmt.Errorf("httpinbox: %s %.64q and %s %.64q disagree: %w",
			webhook.HeaderID, wid, outbox.HeaderEventID, oid, inbox.ErrInvalidMessage)
	}
	h[outbox.HeaderEventID] = wid // the signed one
	return inbox.MessageFromHeaders(h, body)
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
	if err := webhook.Verify(h.cfg.Secrets, r.Header, body, h.cfg.Tolerance); err != nil {
		h.refuse(w, r, http.StatusUnauthorized, "invalid webhook signature", err)
		return
	}
	msg, err := ToMessage(r.Header, body)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, "malformed event", err)
		return
	}
	res, err := h.proc(r.Context(), msg)
	if err != nil {
		if errors.Is(err, inbox.ErrInvalidMessage) {
			h.refuse(w, r, http.StatusBadRequest, "malformed event", err)
			return
		}
		h.log.LogAttrs(r.Context(), slog.LevelWarn, "httpinbox: handler failed; the sender will retry",
			slog.String("event_id", msg.ID.String()), slog.String("event_type", msg.EventType),
			slog.String("aggregate_id", msg.AggregateID), slog.String("remote_addr", r.RemoteAddr), slog.Any("err", err))
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
