package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// What guards the console's door: the token check, its throttle, the
// requests refused before any handler runs, and the cookie's Secure flag.

// maxFormBytes bounds a request body: the console's forms are a few hundred
// bytes.
const maxFormBytes = 64 << 10

// Sign-in throttle. Each failed token check (sign-in form or bearer header)
// takes one token from the client's bucket and one from the console's; a
// check is refused with 429 while either is empty. Buckets refill one token
// per interval up to their burst.
const (
	clientBurst    = 5
	clientInterval = 12 * time.Second // 5 failures a minute per address
	globalBurst    = 30
	globalInterval = 2 * time.Second // 30 failures a minute in all
	// maxClients bounds the per-address buckets kept; past it, new
	// addresses are held by the global bucket alone.
	maxClients = 10000
)

// tokenDigest is what secrets are compared by: digests of a fixed size, so
// the comparison takes the same time whatever the guess's length.
type tokenDigest [sha256.Size]byte

func digest(s string) tokenDigest { return sha256.Sum256([]byte(s)) }

// bucket is a token bucket; tokens is as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// refill brings b to now.
func (b *bucket) refill(now time.Time, burst int, every time.Duration) {
	b.tokens = math.Min(float64(burst), b.tokens+float64(now.Sub(b.at))/float64(every))
	b.at = now
}

// wait is how long until b holds a whole token again.
func (b *bucket) wait(every time.Duration) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(every))
}

// throttle limits failed token checks per client address and in all.
type throttle struct {
	now func() time.Time

	mu      sync.Mutex
	global  bucket
	clients map[string]*bucket
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, global: bucket{tokens: globalBurst, at: now()}, clients: map[string]*bucket{}}
}

// attempt runs check, a token comparison, unless client or the console has
// used up its failures: then it returns false and how long to wait. A
// failed check is charged before the lock is released, so parallel guesses
// are counted one by one; a correct token is never charged. check runs
// under the lock: it must be quick (digest comparisons).
func (t *throttle) attempt(client string, check func() bool) (ok bool, retryAfter time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.global.refill(now, globalBurst, globalInterval)
	b := t.clients[client]
	if b == nil {
		b = &bucket{tokens: clientBurst, at: now}
		if t.track(now) {
			t.clients[client] = b
		}
	}
	b.refill(now, clientBurst, clientInterval)
	if w := max(t.global.wait(globalInterval), b.wait(clientInterval)); w > 0 {
		return false, w
	}
	if check() {
		return true, 0
	}
	t.global.tokens--
	b.tokens--
	return false, 0
}

// track says whether one more client bucket may be kept, forgetting the
// ones that refilled (their clients stopped failing) when the map is large.
func (t *throttle) track(now time.Time) bool {
	if len(t.clients) < maxClients/10 {
		return true
	}
	for k, b := range t.clients {
		if b.refill(now, clientBurst, clientInterval); b.tokens >= clientBurst {
			delete(t.clients, k)
		}
	}
	return len(t.clients) < maxClients
}

// clientKey is who a request is throttled as: its peer's address (a proxy's,
// behind one: the global bucket still holds), an IPv6 address by its /64,
// which one host usually holds whole.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// tokenName returns the name of the token tok, or "": tok is a configured
// secret, or name:secret as OUTBOX_CONSOLE_TOKEN spells it. Digests are
// compared in constant time, every token's, whatever matches.
func (c *Console) tokenName(tok string) string {
	whole := digest(tok)
	prefix, rest, named := strings.Cut(tok, ":")
	after := digest(rest)
	found := ""
	for _, t := range c.tokens {
		m := subtle.ConstantTimeCompare(whole[:], t.digest[:])
		if named && prefix == t.name { // names are not secret: the audit log records them
			m |= subtle.ConstantTimeCompare(after[:], t.digest[:])
		}
		if m == 1 {
			found = t.name
		}
	}
	return found
}

// checkToken is tokenName through the throttle, for r's client. It returns
// the token's name ("" for a wrong one), or a positive wait when the client
// or the console has failed too often.
func (c *Console) checkToken(r *http.Request, tok string) (name string, retryAfter time.Duration) {
	_, wait := c.throttle.attempt(clientKey(r), func() bool {
		name = c.tokenName(tok)
		return name != ""
	})
	if wait > 0 {
		c.log.Info("console token check throttled", "remote", r.RemoteAddr, "retry_after", wait.Round(time.Second).String())
	}
	return name, wait
}

// tooMany answers 429 with Retry-After.
func (c *Console) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, page string) {
	secs := retryAfterSeconds(wait)
	w.Header().Set("Retry-After", fmt.Sprint(secs))
	msg := fmt.Sprintf("Too many wrong tokens from this address or in all: try again in %d s.", secs)
	if page == "login" {
		c.render(w, r, http.StatusTooManyRequests, "login", c.newPage(r, "Sign in", "", loginData{Throttled: msg}))
		return
	}
	c.fail(w, r, http.StatusTooManyRequests, msg)
}

type callerKey struct{}

// withCaller authenticates r once, for every later c.who(r).
func withCaller(r *http.Request, who caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
}

// badParameter names the first parameter (query or form) or path that holds
// a NUL byte or invalid UTF-8, which PostgreSQL would refuse as text: such a
// request is the client's mistake, not the console's.
func badParameter(r *http.Request) (string, bool) {
	bad := func(s string) bool { return !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 }
	if bad(r.URL.Path) {
		return "path", true
	}
	for k, vs := range r.Form {
		if bad(k) {
			return k, true
		}
		for _, v := range vs {
			if bad(v) {
				return k, true
			}
		}
	}
	return "", false
}

// secureRequest says whether the browser reached the console over HTTPS:
// directly, or through a proxy that terminates TLS and says so in
// X-Forwarded-Proto or Forwarded. Trusting the header is safe here: it
// only makes the cookie stricter.
func secureRequest(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
		first, _, _ := strings.Cut(p, ",")
		return strings.EqualFold(strings.TrimSpace(first), "https")
	}
	if f := r.Header.Get("Forwarded"); f != "" {
		first, _, _ := strings.Cut(f, ",") // the proxy nearest the browser
		for _, pair := range strings.Split(first, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
			if strings.EqualFold(k, "proto") {
				return strings.EqualFold(strings.Trim(v, `"`), "https")
			}
		}
	}
	return false
}
