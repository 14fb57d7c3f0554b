package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/console"
)

// deadGroup seeds n dead letters of one group and returns their ids.
func deadGroup(e *env, n int, agg, msg string) []uuid.UUID {
	ids := e.orders(n, agg)
	e.dead(msg, ids...)
	return ids
}

func TestRetryAndDiscardGroups(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	a := deadGroup(e, 3, "o-1", "broker: connection refused")
	b := deadGroup(e, 2, "o-2", "payload too large")
	c := e.client()
	e.login(c)

	// The confirmation page shows the dry run's count and changes nothing.
	conf := e.get(c, "/confirm?action=retry&scope=group&type=order.created&error="+url.QueryEscape("broker: connection refused"))
	mustContain(t, conf.body, `id="confirm-count">3<`, `action="/actions/retry"`, `name="csrf"`)
	if n := e.count("dead_at IS NOT NULL"); n != 5 {
		t.Fatalf("the confirmation page changed rows: %d dead", n)
	}
	csrf := csrfField.FindStringSubmatch(conf.body)[1]

	r := e.post(c, "/actions/retry", url.Values{"csrf": {csrf}, "scope": {"group"}, "type": {"order.created"}, "error": {"broker: connection refused"}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("retry group: %d\n%s", r.status, r.body)
	}
	if n := e.count("dead_at IS NULL AND attempts = 0 AND id = ANY($1)", a); n != 3 {
		t.Errorf("re-queued %d of the group's 3", n)
	}
	if n := e.count("dead_at IS NOT NULL AND id = ANY($1)", b); n != 2 {
		t.Errorf("the other group lost dead letters: %d left", n)
	}
	after := e.get(c, r.header.Get("Location"))
	mustContain(t, after.body, "Re-queued 3 event(s)", `id="total">2<`)

	r = e.post(c, "/actions/discard", url.Values{"csrf": {csrf}, "scope": {"group"}, "type": {"order.created"}, "error": {"payload too large"}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("discard group: %d\n%s", r.status, r.body)
	}
	if n := e.count("id = ANY($1)", b); n != 0 {
		t.Errorf("discard left %d rows", n)
	}
	mustContain(t, e.get(c, r.header.Get("Location")).body, "Discarded 2 dead letter(s).", `id="none"`)

	audit := e.auditLines()
	if len(audit) != 2 {
		t.Fatalf("audit lines = %v", audit)
	}
	if audit[0]["token"] != "alice" || audit[0]["action"] != "retry" || audit[0]["count"] != float64(3) ||
		!strings.Contains(audit[0]["selector"].(string), `error_group="broker: connection refused"`) {
		t.Errorf("retry audit line = %v", audit[0])
	}
	if audit[1]["action"] != "discard" || audit[1]["count"] != float64(2) {
		t.Errorf("discard audit line = %v", audit[1])
	}
}

func TestRetryAndDiscardOne(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	ids := deadGroup(e, 2, "o-1", "boom")
	later := e.orders(2, "o-1")
	e.held(ids[1], later...)
	c := e.client()
	e.login(c)
	csrf := e.csrf(c)

	r := e.post(c, "/actions/retry", url.Values{"csrf": {csrf}, "scope": {"one"}, "id": {ids[0].String()}}, nil)
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/events/"+ids[0].String()) {
		t.Fatalf("retry one: %d %s", r.status, r.header.Get("Location"))
	}
	mustContain(t, e.get(c, r.header.Get("Location")).body, "Re-queued 1 event(s)", `id="state">pending<`) // waiting for the relay again, its last error kept

	conf := e.get(c, "/confirm?action=discard&scope=one&id="+ids[1].String())
	mustContain(t, conf.body, `id="confirm-count">1<`, "Delete for good")
	r = e.post(c, "/actions/discard", url.Values{"csrf": {csrf}, "scope": {"one"}, "id": {ids[1].String()}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("discard one: %d\n%s", r.status, r.body)
	}
	mustContain(t, e.get(c, r.header.Get("Location")).body, "Discarded 1 dead letter(s). 2 held event(s) released.")
	if n := e.count("id = $1", ids[1]); n != 0 {
		t.Error("the discarded dead letter is still there")
	}
	if n := e.count("id = ANY($1) AND dead_at IS NULL AND held_by IS NULL", later); n != 2 {
		t.Errorf("%d of 2 held events released", n)
	}

	// Nothing to do: the confirmation says so and offers no form.
	conf = e.get(c, "/confirm?action=discard&scope=one&id="+ids[0].String())
	mustContain(t, conf.body, `id="confirm-count">0<`, "Nothing to do")
	mustNotContain(t, conf.body, `action="/actions/discard"`)
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	ids := deadGroup(e, 2, "o-1", "boom")
	bearer := map[string]string{"Authorization": "Bearer " + testToken, "Origin": "", "Sec-Fetch-Site": ""}
	// A request without its scope is refused: a missing id never widens into a group.
	if r := e.post(nil, "/actions/retry", url.Values{"id": {ids[0].String()}}, bearer); r.status != http.StatusBadRequest {
		t.Errorf("no scope: %d", r.status)
	}
	if r := e.post(nil, "/actions/retry", url.Values{"scope": {"one"}}, bearer); r.status != http.StatusBadRequest {
		t.Errorf("scope one without an id: %d", r.status)
	}
	if n := e.count("dead_at IS NOT NULL"); n != 2 {
		t.Fatalf("refused requests re-queued %d dead letters", 2-n)
	}
	r := e.post(nil, "/actions/retry", url.Values{"scope": {"one"}, "id": {ids[0].String()}},
		map[string]string{"Authorization": "Bearer " + testToken, "Origin": "", "Sec-Fetch-Site": ""})
	if r.status != http.StatusSeeOther {
		t.Fatalf("bearer retry: %d\n%s", r.status, r.body)
	}
	if n := e.count("dead_at IS NULL AND id = $1", ids[0]); n != 1 {
		t.Error("not re-queued")
	}
	if n := e.count("dead_at IS NOT NULL AND id = $1", ids[1]); n != 1 {
		t.Error("the other dead letter was re-queued too")
	}
	r = e.post(nil, "/actions/retry", url.Values{"scope": {"one"}, "id": {ids[0].String()}},
		map[string]string{"Authorization": "Bearer wrong-token-wrong-token"})
	if r.status != http.StatusUnauthorized {
		t.Errorf("wrong bearer: %d", r.status)
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	ids := deadGroup(e, 1, "o-1", "boom")
	c := e.client()
	e.login(c)
	csrf := e.csrf(c)
	form := url.Values{"csrf": {csrf}, "scope": {"one"}, "id": {ids[0].String()}}

	for _, tc := range []struct {
		name string
		form url.Values
		hdr  map[string]string
		want int
	}{
		{"cross-site POST with the session and its token", form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"cross-origin POST from an old browser", form, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"missing CSRF token", url.Values{"scope": {"one"}, "id": form["id"]}, nil, http.StatusForbidden},
		{"wrong CSRF token", url.Values{"csrf": {strings.Repeat("0", 64)}, "scope": {"one"}, "id": form["id"]}, nil, http.StatusForbidden},
	} {
		r := e.post(c, "/actions/discard", tc.form, tc.hdr)
		if r.status != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, r.status, tc.want)
		}
	}
	// Without a session at all.
	if r := e.post(nil, "/actions/discard", form, nil); r.status != http.StatusUnauthorized {
		t.Errorf("no session: %d", r.status)
	}
	// GET never acts.
	for _, p := range []string{"/actions/retry?id=" + ids[0].String(), "/actions/discard?id=" + ids[0].String() + "&csrf=" + csrf,
		"/confirm?action=discard&scope=one&id=" + ids[0].String()} {
		r := e.get(c, p)
		if strings.HasPrefix(p, "/actions/") && r.status != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d, want 405", p, r.status)
		}
	}
	// A cross-site login (login CSRF) is refused too.
	if r := e.post(e.client(), "/login", url.Values{"token": {testToken}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); r.status != http.StatusForbidden {
		t.Errorf("cross-site login: %d", r.status)
	}
	if n := e.count("dead_at IS NOT NULL AND id = $1", ids[0]); n != 1 {
		t.Fatal("a refused request changed the dead letter")
	}
	if a := e.auditLines(); len(a) != 0 {
		t.Errorf("audit lines for refused requests: %v", a)
	}
	// And the same session acts with its token, same-origin.
	if r := e.post(c, "/actions/discard", form, nil); r.status != http.StatusSeeOther {
		t.Errorf("same-origin discard with the token: %d\n%s", r.status, r.body)
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	for _, cfg := range []console.Config{{}, {Tokens: map[string]string{"alice": testToken}, ReadOnly: true}} {
		e := setup(t, cfg)
		ids := deadGroup(e, 1, "o-1", "boom")
		hdr := map[string]string{"Authorization": "Bearer " + testToken}
		if r := e.post(nil, "/actions/retry", url.Values{"scope": {"one"}, "id": {ids[0].String()}}, hdr); r.status != http.StatusForbidden {
			t.Errorf("read-only (tokens %d): retry %d, want 403", len(cfg.Tokens), r.status)
		}
		conf := e.get(nil, "/confirm?action=retry&scope=one&id="+ids[0].String())
		mustContain(t, conf.body, "This console is read-only.")
		mustNotContain(t, conf.body, `action="/actions/retry"`)
		if n := e.count("dead_at IS NOT NULL"); n != 1 {
			t.Error("a read-only console changed a row")
		}
	}
	e := setup(t, console.Config{})
	if r := e.get(nil, "/login"); r.status != http.StatusNotFound {
		t.Errorf("login page without tokens: %d", r.status)
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	c := e.client()
	if r := e.post(c, "/login", url.Values{"token": {"not-the-token-at-all"}}, nil); r.status != http.StatusUnauthorized ||
		!strings.Contains(r.body, `id="login-failed"`) || len(r.header.Values("Set-Cookie")) != 0 {
		t.Errorf("wrong token: %d %v", r.status, r.header.Values("Set-Cookie"))
	}
	r := e.post(c, "/login", url.Values{"token": {testToken}}, nil)
	ck := r.header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(ck, attr) {
			t.Errorf("session cookie %q lacks %s", ck, attr)
		}
	}
	if strings.Contains(ck, testToken) {
		t.Error("the session cookie holds the token")
	}
	home := e.get(c, "/")
	mustContain(t, home.body, `<span class="user">alice</span>`)
	csrf := csrfField.FindStringSubmatch(home.body)[1]
	if r := e.post(c, "/logout", url.Values{"csrf": {csrf}}, nil); r.status != http.StatusSeeOther {
		t.Errorf("logout: %d", r.status)
	}
	mustContain(t, e.get(c, "/").body, `id="signin"`)
	// The cookie is gone: the client cannot act any more.
	if r := e.post(c, "/actions/retry", url.Values{"csrf": {csrf}, "scope": {"one"}, "id": {uuid.NewString()}}, nil); r.status != http.StatusUnauthorized {
		t.Errorf("after logout: %d", r.status)
	}
}

// A dead-letter group whose error is empty is a group of its own: listed
// with one member, it opens, counts and acts on that member only, in both
// views, never on every dead letter of its type (or every dead letter).
func TestEmptyErrorGroup(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	blank := deadGroup(e, 1, "o-1", "")
	boom := deadGroup(e, 2, "o-2", "boom")
	other := e.insert(ev{aggType: "invoice", aggID: "i-1", eventType: "invoice.issued"})
	e.exec(`UPDATE {T} SET dead_at = now(), attempts = 3, last_error = NULL WHERE id = $1`, other[0])
	c := e.client()
	e.login(c)

	list := e.get(c, "/dead-letters")
	mustContain(t, list.body, "(no error recorded)")
	link := regexp.MustCompile(`href="(/dead-letters/group\?type=order.created&amp;error=)"`).FindStringSubmatch(list.body)
	if link == nil {
		t.Fatalf("no link to the empty-error group of order.created:\n%s", list.body)
	}
	g := e.get(c, strings.ReplaceAll(link[1], "&amp;", "&"))
	mustContain(t, g.body, `id="group-count">1<`, `id="group-error">none recorded<`, blank[0].String())
	mustNotContain(t, g.body, boom[0].String(), other[0].String())
	retryLink := regexp.MustCompile(`id="retry-group" href="([^"]+)"`).FindStringSubmatch(g.body)
	if retryLink == nil {
		t.Fatalf("no retry button:\n%s", g.body)
	}
	conf := e.get(c, strings.ReplaceAll(retryLink[1], "&amp;", "&"))
	mustContain(t, conf.body, `id="confirm-count">1<`, "that recorded no error", `name="error" value=""`)

	// By error alone: the empty group holds the two without an error.
	byErr := e.get(c, "/dead-letters?by=error")
	link = regexp.MustCompile(`href="(/dead-letters/group\?type=&amp;error=)"`).FindStringSubmatch(byErr.body)
	if link == nil {
		t.Fatalf("no link to the empty-error group by error:\n%s", byErr.body)
	}
	mustContain(t, e.get(c, strings.ReplaceAll(link[1], "&amp;", "&")).body, `id="group-count">2<`)

	csrf := e.csrf(c)
	r := e.post(c, "/actions/discard", url.Values{"csrf": {csrf}, "scope": {"group"}, "type": {"order.created"}, "error": {""}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("discard the empty group: %d\n%s", r.status, r.body)
	}
	mustContain(t, e.get(c, r.header.Get("Location")).body, "Discarded 1 dead letter(s).")
	if n := e.count("id = ANY($1)", append(boom, other...)); n != 3 {
		t.Errorf("discarding the empty-error group of order.created deleted %d other dead letters", 3-n)
	}
	audit := e.auditLines()
	if len(audit) != 1 || audit[0]["selector"] != `event_type="order.created" error_group=""` {
		t.Errorf("audit = %v", audit)
	}
	// Without the error parameter the group is every error of the type, as
	// the overview's per-type link means it.
	mustContain(t, e.get(c, "/dead-letters/group?type=order.created").body, `id="group-count">2<`, `id="group-error">any<`)
}
