// Package console is pgoutbox's operator console: a few server-rendered pages
// over the outbox table for what operators would rather look at than read
// (is the relay keeping up, what is stuck and why) and the dead-letter
// actions of admin.Admin, behind a token.
//
// A Console is an http.Handler. `outbox console` serves one on its own and
// `outbox relay --console` mounts one on the relay's HTTP server; an
// application can mount one on its admin server:
//
//	c, err := console.New(pool, console.Config{Tokens: map[string]string{"ops": secret}, Prefix: "/outbox/"})
//	mux.Handle("/outbox/", c)
//
// Security model: without a token the console is read-only. With tokens,
// the actions (retry, discard) need one, as a bearer header or through the
// login form, which sets an HttpOnly, SameSite=Strict session cookie (Secure
// over HTTPS, X-Forwarded-Proto: https included). Tokens are compared as
// SHA-256 digests in constant time; wrong ones are throttled per client
// address and in all (429 with Retry-After). Every
// state-changing request is a POST checked against cross-origin requests
// (Sec-Fetch-Site and Origin), and a POST authenticated by the cookie must
// also carry the session's CSRF token. No GET changes anything. Every value
// read from the table is escaped by html/template; pages carry a
// Content-Security-Policy that allows no script at all. Payloads are shown
// only on an explicit click, only to a signed-in user when tokens are set, and
// never with HidePayloads. Each action is logged (token name, action,
// selector, count). A parameter holding a NUL byte or invalid UTF-8 is
// refused with 400 naming it.
package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
)

// Defaults of Config.
const (
	// DefaultSessionTTL is how long a login lasts.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultQueryTimeout bounds the queries of one page or action.
	DefaultQueryTimeout = 10 * time.Second
	// DefaultPrefix serves the console at the root of its server.
	DefaultPrefix = "/"
	// MinTokenLength is the shortest token accepted: a console token guards
	// deletes.
	MinTokenLength = 16
)

// Config configures a Console. Zero values mean the documented defaults.
type Config struct {
	// Schema and Table name the outbox table, as in admin.Config.
	Schema string
	Table  string
	// Tokens maps each token's name, which the audit log records, to its
	// secret (at least MinTokenLength bytes). Without tokens the console is
	// read-only. A token is given as its secret, or as name:secret.
	Tokens map[string]string
	// ReadOnly disables the actions even for a signed-in user.
	ReadOnly bool
	// HidePayloads never shows payloads, even on request.
	HidePayloads bool
	// Logger receives the audit lines and errors. Defaults to discarding.
	Logger *slog.Logger
	// Relay, when set, is called by the overview to show the state of the
	// relay serving the console.
	Relay func(ctx context.Context) RelayState
	// Prefix is the path the console is served under, with a trailing
	// slash. Defaults to DefaultPrefix ("/").
	Prefix string
	// SessionTTL is how long a login lasts. Defaults to DefaultSessionTTL
	// (12h).
	SessionTTL time.Duration
	// QueryTimeout bounds one page's queries. Defaults to
	// DefaultQueryTimeout (10s).
	QueryTimeout time.Duration
}

// RelayState is what the overview shows of the relay serving the console.
type RelayState struct {
	Source    string // the table the relay reads, quoted
	Broker    string // the broker's URL, without credentials
	Workers   int
	BatchSize int
	Ordered   bool
	// Ready is nil when the relay is ready (database and broker reachable),
	// else why not.
	Ready error
	// BrokerDown says the broker was unreachable on the last batch or fails
	// its health check.
	BrokerDown bool
}

// Console is the console's http.Handler.
type Console struct {
	admin   *admin.Admin
	cfg     Config
	log     *slog.Logger
	handler http.Handler

	tokens   []namedToken // sorted by name
	throttle *throttle

	mu       sync.Mutex
	sessions map[string]*session
}

// namedToken is one of Config.Tokens, kept as a digest.
type namedToken struct {
	name   string
	digest tokenDigest
}

// session is one login.
type session struct {
	name    string // the token's name
	csrf    string
	expires time.Time
}

// ParseTokens reads tokens from a flag or environment value: a
// comma-separated list of name:secret, or a single bare secret, named
// "operator".
func ParseTokens(s string) (map[string]string, error) {
	out := map[string]string{}
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	if !strings.Contains(s, ":") && !strings.Contains(s, ",") {
		out["operator"] = s
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, secret, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || name == "" || secret == "" {
			return nil, errors.New("want a secret, or name:secret pairs separated by commas")
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("token name %q given twice", name)
		}
		out[name] = secret
	}
	return out, nil
}

// New validates cfg and returns a console on pool's outbox table. It does not
// touch the database.
func New(pool *pgxpool.Pool, cfg Config) (*Console, error) {
	adm, err := admin.New(pool, admin.Config{Schema: cfg.Schema, Table: cfg.Table})
	if ce := (*outbox.ConfigError)(nil); errors.As(err, &ce) {
		return nil, bad(ce.Field, "%w", ce.Err) // Schema or Table: this Config's fields
	} else if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	for name, secret := range cfg.Tokens {
		switch {
		case name == "" || strings.ContainsAny(name, ":,\n\r"):
			return nil, bad("Tokens", "name %q: must be non-empty, without ':', ',' or newlines", name)
		case len(secret) < MinTokenLength:
			return nil, bad("Tokens", "token %q: %d bytes, want at least %d", name, len(secret), MinTokenLength)
		}
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, DefaultPrefix)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, DefaultSessionTTL)
	cfg.QueryTimeout = cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout)
	switch {
	case !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/"):
		return nil, bad("Prefix", "%q must start and end with /", cfg.Prefix)
	case cfg.SessionTTL < 0:
		return nil, bad("SessionTTL", "%s must not be negative", cfg.SessionTTL)
	case cfg.QueryTimeout < 0:
		return nil, bad("QueryTimeout", "%s must not be negative", cfg.QueryTimeout)
	}
	c := &Console{admin: adm, cfg: cfg, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		sessions: map[string]*session{}, throttle: newThrottle(time.Now)}
	for name, secret := range cfg.Tokens {
		c.tokens = append(c.tokens, namedToken{name: name, digest: digest(secret)})
	}
	sort.Slice(c.tokens, func(i, j int) bool { return c.tokens[i].name < c.tokens[j].name })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /dead-letters", c.deadLetters)
	mux.HandleFunc("GET /dead-letters/group", c.deadLetterGroup)
	mux.HandleFunc("GET /events/{id}", c.event)
	mux.HandleFunc("GET /aggregates", c.timeline)
	mux.HandleFunc("GET /search", c.search)
	mux.HandleFunc("GET /confirm", c.confirm)
	mux.HandleFunc("POST /actions/retry", c.action)
	mux.HandleFunc("POST /actions/discard", c.action)
	mux.HandleFunc("/actions/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		c.fail(w, r, http.StatusMethodNotAllowed, "actions are taken by POST only, from their confirmation page")
	})
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.logout)
	mux.Handle("GET /static/", http.FileServerFS(staticFS))
	mux.HandleFunc("/", c.notFound)

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, "cross-origin request refused")
	}))
	c.handler = cop.Handler(mux)
	if p := strings.TrimSuffix(cfg.Prefix, "/"); p != "" {
		c.handler = http.StripPrefix(p, c.handler)
	}
	return c, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "console.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// ServeHTTP serves the console's pages, static files and actions.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	r = withCaller(r, caller{}) // until authenticated: the error pages below need one
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.log.Debug("console: unreadable request", "path", r.URL.Path, "err", err, "remote", r.RemoteAddr)
		c.fail(w, r, http.StatusBadRequest, "cannot read the request's parameters")
		return
	}
	if name, bad := badParameter(r); bad {
		c.log.Debug("console: parameter refused", "path", r.URL.Path, "param", name, "remote", r.RemoteAddr)
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("parameter %q: contains a NUL byte or invalid UTF-8", name))
		return
	}
	who, wait := c.authenticate(r)
	if wait > 0 {
		c.tooMany(w, r, wait, "")
		return
	}
	c.handler.ServeHTTP(w, withCaller(r, who))
}

// canAct says whether the console accepts actions at all.
func (c *Console) canAct() bool { return len(c.cfg.Tokens) > 0 && !c.cfg.ReadOnly }

const cookieName = "outbox_console"

// caller is who makes a request.
type caller struct {
	name    string   // token name; "" when not signed in
	session *session // set when signed in by the cookie
}

// who is r's caller, as ServeHTTP authenticated it.
func (c *Console) who(r *http.Request) caller {
	who, _ := r.Context().Value(callerKey{}).(caller)
	return who
}

// authenticate reads r's bearer header or session cookie. A bearer token is
// checked through the throttle: wait is positive when r's client (or the
// console) has failed too often. A wrong bearer token leaves the request
// anonymous.
func (c *Console) authenticate(r *http.Request) (_ caller, wait time.Duration) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || len(c.tokens) == 0 {
			return caller{}, 0 // another scheme (a proxy's own), or nothing to check against
		}
		name, wait := c.checkToken(r, strings.TrimSpace(tok))
		if name == "" && wait == 0 {
			c.log.Warn("console bearer token refused", "remote", r.RemoteAddr)
		}
		return caller{name: name}, wait
	}
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return caller{}, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[ck.Value]
	if s == nil {
		return caller{}, 0
	}
	if time.Now().After(s.expires) {
		delete(c.sessions, ck.Value)
		return caller{}, 0
	}
	return caller{name: s.name, session: s}, 0
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func (c *Console) newSession(name string) (id string, s *session) {
	id = randomHex(32)
	s = &session{name: name, csrf: randomHex(32), expires: time.Now().Add(c.cfg.SessionTTL)}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for k, old := range c.sessions { // the map stays as small as the live logins
		if now.After(old.expires) {
			delete(c.sessions, k)
		}
	}
	c.sessions[id] = s
	return id, s
}

// checkCSRF verifies a cookie-authenticated POST's CSRF token. Cross-origin
// requests are refused before this, by http.CrossOriginProtection; a bearer
// header is never sent by a browser on its own, so it needs no token.
func checkCSRF(r *http.Request, who caller) bool {
	if who.session == nil {
		return who.name != ""
	}
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(who.session.csrf)) == 1
}

func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.cfg.QueryTimeout)
}
