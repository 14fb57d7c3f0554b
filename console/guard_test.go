package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/console"
)

// fakeClock is a throttle clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(c *console.Console) *fakeClock {
	f := &fakeClock{}
	f.ns.Store(time.Now().UnixNano())
	console.SetClock(c, func() time.Time { return time.Unix(0, f.ns.Load()) })
	return f
}

func (f *fakeClock) advance(d time.Duration) { f.ns.Add(int64(d)) }

// Wrong tokens are throttled per client address: five, then 429 with a
// Retry-After, for the right token too (or the answer would tell a guess
// apart); once the wait is over, the right token signs in.
func TestLoginThrottlePerClient(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	clock := newFakeClock(e.c)
	wrong := url.Values{"token": {"not-the-token-at-all"}}
	for i := range 5 {
		if r := e.post(nil, "/login", wrong, nil); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, r.status)
		}
	}
	r := e.post(nil, "/login", wrong, nil)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("6th wrong token: %d, want 429", r.status)
	}
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 12 {
		t.Errorf("Retry-After = %q, want 1 to 12 seconds", r.header.Get("Retry-After"))
	}
	mustContain(t, r.body, `id="login-throttled"`, "try again in")
	if r := e.post(nil, "/login", url.Values{"token": {testToken}}, nil); r.status != http.StatusTooManyRequests {
		t.Errorf("right token while throttled: %d, want 429", r.status)
	}
	// A bearer header is checked through the same throttle.
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	if r := e.post(nil, "/actions/retry", url.Values{"scope": {"one"}}, bearer); r.status != http.StatusTooManyRequests {
		t.Errorf("bearer while throttled: %d, want 429", r.status)
	}
	clock.advance(time.Duration(secs) * time.Second)
	if r := e.post(nil, "/login", url.Values{"token": {testToken}}, nil); r.status != http.StatusSeeOther {
		t.Errorf("right token after Retry-After: %d, want 303", r.status)
	}
	// One failure was refilled: one more wrong token, then 429 again.
	if r := e.post(nil, "/login", wrong, nil); r.status != http.StatusUnauthorized {
		t.Errorf("wrong token after the wait: %d, want 401", r.status)
	}
	if r := e.post(nil, "/login", wrong, nil); r.status != http.StatusTooManyRequests {
		t.Errorf("wrong token past the refill: %d, want 429", r.status)
	}
}

// Guesses sent in parallel are counted one by one: 50 at once get five 401s.
func TestLoginThrottleParallel(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	newFakeClock(e.c) // no refill while they run
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
	)
	for range 50 {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", e.srv.URL+"/login", strings.NewReader("token=guess-guess-guess-guess"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			mu.Lock()
			statuses[res.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[http.StatusUnauthorized] != 5 || statuses[http.StatusTooManyRequests] != 45 {
		t.Errorf("statuses = %v, want 5 × 401 and 45 × 429", statuses)
	}
}

// Failures from many addresses add up to the global limit: 30, then 429 for
// an address that never failed.
func TestLoginThrottleGlobal(t *testing.T) {
	t.Parallel()
	login := func(c *console.Console, addr, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.RemoteAddr = addr
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		return w
	}
	e := setup(t, withToken())
	newFakeClock(e.c)
	for i := range 30 {
		addr := "198.51.100." + strconv.Itoa(i/2) + ":4000" // two guesses per address: under its own limit
		if w := login(e.c, addr, "guess-guess-guess-guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d from %s: %d, want 401", i+1, addr, w.Code)
		}
	}
	w := login(e.c, "203.0.113.9:4000", testToken)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("after 30 failures in all: %d (Retry-After %q), want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}

	// IPv6 clients are counted by their /64.
	e = setup(t, withToken())
	newFakeClock(e.c)
	for i := range 5 {
		if w := login(e.c, "[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:4000", "guess-guess-guess-guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("IPv6 guess %d: %d, want 401", i+1, w.Code)
		}
	}
	if w := login(e.c, "[2001:db8:1:2::ff]:4000", "guess-guess-guess-guess"); w.Code != http.StatusTooManyRequests {
		t.Errorf("6th guess from the same /64: %d, want 429", w.Code)
	}
	if w := login(e.c, "[2001:db8:1:3::1]:4000", testToken); w.Code != http.StatusSeeOther {
		t.Errorf("another /64: %d, want 303", w.Code)
	}
}

// The token is accepted as set in OUTBOX_CONSOLE_TOKEN (name:secret) or as
// its secret alone; the form says so. Another token's name, or a part of
// the secret, is refused.
func TestLoginTokenForms(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{Tokens: map[string]string{"ops": testToken, "bob": "bob-secret-bob-secret"}})
	mustContain(t, e.get(nil, "/login").body, `id="token-help"`, "name:secret")
	for tok, want := range map[string]int{
		"ops:" + testToken:      http.StatusSeeOther,
		testToken:               http.StatusSeeOther,
		" ops:" + testToken:     http.StatusSeeOther, // pasted with a space
		"bob:" + testToken:      http.StatusUnauthorized,
		"ops:" + testToken[:10]: http.StatusUnauthorized,
		testToken + "x":         http.StatusUnauthorized,
		"ops:":                  http.StatusUnauthorized,
	} {
		if r := e.post(nil, "/login", url.Values{"token": {tok}}, nil); r.status != want {
			t.Errorf("login with %q: %d, want %d", tok, r.status, want)
		}
	}
	c := e.client()
	if r := e.post(c, "/login", url.Values{"token": {"ops:" + testToken}}, nil); r.status != http.StatusSeeOther {
		t.Fatalf("login: %d", r.status)
	}
	mustContain(t, e.get(c, "/").body, `<span class="user">ops</span>`)
}

// Behind a proxy that terminates TLS, the session cookie is Secure.
func TestSecureCookieBehindTLSProxy(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	for hdr, secure := range map[string]bool{
		"X-Forwarded-Proto: https":           true,
		"X-Forwarded-Proto: HTTPS, http":     true,
		"X-Forwarded-Proto: http":            false,
		`Forwarded: for=1.2.3.4;proto=https`: true,
		"":                                   false,
	} {
		h := map[string]string{}
		if k, v, ok := strings.Cut(hdr, ": "); ok {
			h[k] = v
		}
		r := e.post(nil, "/login", url.Values{"token": {testToken}}, h)
		ck := r.header.Get("Set-Cookie")
		if r.status != http.StatusSeeOther || strings.Contains(ck, "; Secure") != secure {
			t.Errorf("%q: %d, cookie %q; want Secure=%v", hdr, r.status, ck, secure)
		}
	}
}

// A NUL byte or invalid UTF-8 in a parameter is the client's mistake: 400
// naming the parameter, nothing logged above INFO, and no query run.
func TestBadParameters(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	ids := deadGroup(e, 1, "o-1", "boom")
	for path, param := range map[string]string{
		"/aggregates?id=o%00":                                             "id",
		"/aggregates?id=%ff%fe":                                           "id",
		"/dead-letters/group?type=order.created&error=b%00":               "error",
		"/dead-letters/group?type=%c3":                                    "type",
		"/confirm?action=retry&scope=group&type=x&error=%ff":              "error",
		"/search?q=%00":                                                   "q",
		"/aggregates?id=o-1&%ff=1":                                        "\xff",
		"/events/" + ids[0].String() + "?payload=%00":                     "payload",
		"/dead-letters?by=%e2%82":                                         "by",
		"/confirm?action=discard&scope=one&id=" + ids[0].String() + "%00": "id",
	} {
		r := e.get(nil, path)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, "parameter "+strings.ReplaceAll(strconv.Quote(param), `"`, "&#34;")) {
			t.Errorf("GET %s: %d, want 400 naming %q:\n%s", path, r.status, param, r.body)
		}
	}
	r := e.post(nil, "/login", url.Values{"token": {"a\x00b"}}, nil)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "parameter &#34;token&#34;") {
		t.Errorf("POST /login with a NUL: %d\n%s", r.status, r.body)
	}
	for _, level := range []string{`"level":"ERROR"`, `"level":"WARN"`} {
		if strings.Contains(e.logs.String(), level) {
			t.Errorf("logged at %s:\n%s", level, e.logs.String())
		}
	}
	if n := e.count("dead_at IS NOT NULL"); n != 1 {
		t.Error("a refused request changed a row")
	}
}
