package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/console"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
)

func testdbPool(t *testing.T) *pgxpool.Pool { return testdb.Pool(t, "") }

func TestOverview(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ids := e.orders(6, "o-1")
	other := e.insert(ev{aggType: "customer", aggID: "c-1", eventType: "customer.registered"})
	e.published(other...)
	e.published(ids[0])
	e.dead("broker said no", ids[1])
	e.held(ids[1], ids[2], ids[3])

	r := e.get(nil, "/")
	if r.status != http.StatusOK {
		t.Fatalf("overview: %d\n%s", r.status, r.body)
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	mustContain(t, r.body,
		`id="pending">2<`, `id="dead">1<`, `id="held">2<`, `id="blocked">1<`,
		`<code>order.created</code>`, `<code>customer.registered</code>`,
		"Published per minute, last hour", "2 published in the last hour",
		`read-only`, // no token
		`aggregates?type=order&amp;id=o-1`)
	if n := strings.Count(r.body, `class="bar"`); n != 60 {
		t.Errorf("chart has %d bars, want 60", n)
	}
	mustNotContain(t, r.body, "Relay</h2>") // not served by a relay
}

func TestOverviewRelayState(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{Relay: func(ctxx context.Context) console.RelayState {
		return console.RelayState{Source: `"public"."outbox_events"`, Broker: "nats://127.0.0.1:4222", Workers: 3, BatchSize: 250,
			Ready: errors.New("broker: unavailable on the last batch"), BrokerDown: true}
	}})
	r := e.get(nil, "/")
	mustContain(t, r.body, "Relay</h2>", "<dd>3</dd>", "<dd>250</dd>", "nats://127.0.0.1:4222", "not ready",
		"broker: unavailable on the last batch", `<span class="badge dead">unavailable</span>`, "&#34;public&#34;.&#34;outbox_events&#34;")
}

func TestDeadLetterGroupsAndGroupPage(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ids := e.orders(5, "o-1")
	for i, id := range ids[:3] {
		e.dead("offset "+string(rune('1'+i))+" out of range", id)
	}
	e.dead("schema registry: subject not found", ids[3])

	r := e.get(nil, "/dead-letters")
	mustContain(t, r.body, `id="total">4<`, "offset &lt;n&gt; out of range", "schema registry: subject not found",
		`dead-letters/group?type=order.created&amp;error=offset%20%3cn%3e%20out%20of%20range`)
	counts := regexp.MustCompile(`class="n count">(\d+)<`).FindAllStringSubmatch(r.body, -1)
	if len(counts) != 2 || counts[0][1] != "3" || counts[1][1] != "1" {
		t.Errorf("group counts = %v, want 3 then 1", counts)
	}
	byErr := e.get(nil, "/dead-letters?by=error")
	mustContain(t, byErr.body, "group by event type and error")

	g := e.get(nil, "/dead-letters/group?type=order.created&error="+url.QueryEscape("offset <n> out of range"))
	if g.status != http.StatusOK {
		t.Fatalf("group page: %d\n%s", g.status, g.body)
	}
	mustContain(t, g.body, `id="group-count">3<`, ids[0].String(), ids[2].String(), "offset 1 out of range",
		`confirm?action=retry&amp;scope=group&amp;type=order.created&amp;error=offset%20%3cn%3e%20out%20of%20range`,
		`confirm?action=discard&amp;scope=one&amp;id=`+ids[0].String())
	mustNotContain(t, g.body, ids[3].String(), ids[4].String(), `action="/actions/`) // no form on a read-only console
}

func TestEventPage(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ids := e.insert(ev{aggType: "order", aggID: "o-9", eventType: "order.paid", payload: `{"card":"4111-1111"}`,
		headers: `{"traceparent":"00-abc-01","tenant":"acme"}`})
	e.dead("card declined", ids[0])

	r := e.get(nil, "/events/"+ids[0].String())
	if r.status != http.StatusOK {
		t.Fatalf("event: %d\n%s", r.status, r.body)
	}
	mustContain(t, r.body, `id="state">dead<`, "order.paid", "o-9", "card declined", "traceparent", "00-abc-01", "tenant",
		`id="show-payload"`, "?payload=1")
	mustNotContain(t, r.body, "4111-1111") // only on an explicit click

	shown := e.get(nil, "/events/"+ids[0].String()+"?payload=1")
	mustContain(t, shown.body, `&#34;card&#34;: &#34;4111-1111&#34;`)

	if r := e.get(nil, "/events/"+uuid.NewString()); r.status != http.StatusNotFound {
		t.Errorf("unknown event: %d", r.status)
	}
	if r := e.get(nil, "/events/nope"); r.status != http.StatusBadRequest {
		t.Errorf("bad id: %d", r.status)
	}
}

func TestHidePayloads(t *testing.T) {
	t.Parallel()
	cfg := withToken()
	cfg.HidePayloads = true
	e := setup(t, cfg)
	ids := e.insert(ev{aggType: "order", aggID: "o-1", eventType: "order.paid", payload: `{"email":"someone@example.com"}`})
	c := e.client()
	e.login(c)
	r := e.get(c, "/events/"+ids[0].String()+"?payload=1")
	mustContain(t, r.body, `id="payload-hidden"`)
	mustNotContain(t, r.body, "someone@example.com", `id="show-payload"`)
}

func TestPayloadNeedsLoginWhenTokensAreSet(t *testing.T) {
	t.Parallel()
	e := setup(t, withToken())
	ids := e.insert(ev{aggType: "order", aggID: "o-1", eventType: "order.paid", payload: `{"email":"someone@example.com"}`})
	r := e.get(nil, "/events/"+ids[0].String()+"?payload=1")
	mustContain(t, r.body, "sign in</a> to see it")
	mustNotContain(t, r.body, "someone@example.com")
	c := e.client()
	e.login(c)
	mustContain(t, e.get(c, "/events/"+ids[0].String()+"?payload=1").body, "someone@example.com")
}

func TestTimeline(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ids := e.orders(5, "o-7")
	e.orders(2, "o-8")
	e.published(ids[0])
	e.dead("timeout talking to the broker", ids[1])
	e.held(ids[1], ids[2], ids[3])

	r := e.get(nil, "/aggregates?type=order&id=o-7")
	if r.status != http.StatusOK {
		t.Fatalf("timeline: %d\n%s", r.status, r.body)
	}
	rows := regexp.MustCompile(`<tr class="st-(\w+)">`).FindAllStringSubmatch(r.body, -1)
	var states []string
	for _, m := range rows {
		states = append(states, m[1])
	}
	if got := strings.Join(states, ","); got != "published,dead,held,held,pending" {
		t.Errorf("timeline states = %s", got)
	}
	mustContain(t, r.body, `id="blocker"`, "timeout talking to the broker", "3 later event(s) wait behind it")
	if r := e.get(nil, "/aggregates?id=nope"); !strings.Contains(r.body, `id="none"`) {
		t.Errorf("unknown aggregate: %s", r.body)
	}
	if r := e.get(nil, "/aggregates"); r.status != http.StatusBadRequest {
		t.Errorf("no id: %d", r.status)
	}
}

func TestSearch(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ids := e.orders(1, "o-1")
	r := e.get(nil, "/search?q="+ids[0].String())
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/events/"+ids[0].String() {
		t.Errorf("search by id: %d %s", r.status, r.header.Get("Location"))
	}
	r = e.get(nil, "/search?q="+url.QueryEscape("o-1 "))
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/aggregates?id=o-1" {
		t.Errorf("search by aggregate: %d %s", r.status, r.header.Get("Location"))
	}
	// A uuid that is no event's may be an aggregate's id.
	agg := uuid.NewString()
	e.insert(ev{aggType: "order", aggID: agg, eventType: "order.created"})
	r = e.get(nil, "/search?q="+agg)
	if r.header.Get("Location") != "/aggregates?id="+agg {
		t.Errorf("search by uuid aggregate id: %s", r.header.Get("Location"))
	}
	if r := e.get(nil, "/search"); r.status != http.StatusOK {
		t.Errorf("search page: %d", r.status)
	}
	if r := e.get(nil, "/nowhere"); r.status != http.StatusNotFound {
		t.Errorf("unknown page: %d", r.status)
	}
	if r := e.get(nil, "/static/console.css"); r.status != http.StatusOK || !strings.Contains(r.body, ".chart") {
		t.Errorf("stylesheet: %d", r.status)
	}
}

// A stored <script> in any column renders as text on every page.
func TestStoredScriptRendersAsText(t *testing.T) {
	t.Parallel()
	const x = `<script>alert("x")</script>`
	e := setup(t, console.Config{})
	ids := e.insert(ev{aggType: "order" + x, aggID: "o-1" + x, eventType: "order.created" + x,
		payload: `{"html":"<script>alert(\"payload\")</script>"}`, headers: `{"x-evil":"<script>alert(\"header\")</script>","<img src=x onerror=alert(1)>":"v"}`})
	more := e.insert(ev{aggType: "order" + x, aggID: "o-1" + x, eventType: "order.created" + x})
	e.dead("failed: "+x, ids[0])
	e.held(ids[0], more...)
	g := "/dead-letters/group?type=" + url.QueryEscape("order.created"+x) + "&error=" + url.QueryEscape("failed: "+x)
	for _, path := range []string{"/", "/dead-letters", "/dead-letters?by=error", g,
		"/events/" + ids[0].String() + "?payload=1", "/aggregates?id=" + url.QueryEscape("o-1"+x),
		"/confirm?action=retry&scope=group&type=" + url.QueryEscape("order.created"+x) + "&error=" + url.QueryEscape("failed: "+x),
		"/events/" + url.PathEscape(x), "/search?q=" + url.QueryEscape(x)} {
		r := e.get(nil, path)
		if strings.Contains(r.body, "<script") || strings.Contains(r.body, "<img") {
			t.Errorf("%s: a stored tag is rendered as markup:\n%s", path, r.body)
		}
	}
	mustContain(t, e.get(nil, "/events/"+ids[0].String()+"?payload=1").body,
		`failed: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`, `&lt;script&gt;alert(&#34;header&#34;)&lt;/script&gt;`,
		`&lt;script&gt;alert(\&#34;payload\&#34;)&lt;/script&gt;`, `&lt;img src=x onerror=alert(1)&gt;`)
	mustContain(t, e.get(nil, "/dead-letters").body, `order.created&lt;script&gt;`)
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming console.Config and the field, the table's names included.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	pool := testdbPool(t)
	for _, tc := range []struct {
		cfg   console.Config
		field string
	}{
		{console.Config{Tokens: map[string]string{"a": "short"}}, "Tokens"},
		{console.Config{Tokens: map[string]string{"a:b": testToken}}, "Tokens"},
		{console.Config{Prefix: "console"}, "Prefix"},
		{console.Config{SessionTTL: -time.Second}, "SessionTTL"},
		{console.Config{QueryTimeout: -time.Second}, "QueryTimeout"},
		{console.Config{Table: strings.Repeat("x", 80)}, "Table"},
		{console.Config{Schema: "a\x00b"}, "Schema"},
	} {
		_, err := console.New(pool, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "console.Config", tc.field)
	}
	if _, err := console.New(nil, console.Config{}); err == nil {
		t.Error("New(nil pool) succeeded")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultSessionTTL":   console.DefaultSessionTTL,
		"DefaultQueryTimeout": console.DefaultQueryTimeout,
		"DefaultPrefix":       console.DefaultPrefix,
	})
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	got, err := console.ParseTokens("bare-secret-value-123")
	if err != nil || len(got) != 1 || got["operator"] != "bare-secret-value-123" {
		t.Errorf("bare: %v %v", got, err)
	}
	got, err = console.ParseTokens("alice:aaaaaaaaaaaaaaaaaaaa, bob:bbbbbbbbbbbbbbbbbbbbbb")
	if err != nil || got["alice"] != "aaaaaaaaaaaaaaaaaaaa" || got["bob"] != "bbbbbbbbbbbbbbbbbbbbbb" {
		t.Errorf("pairs: %v %v", got, err)
	}
	for _, bad := range []string{"alice:", ":x", "a:x,a:y", "a:x,b"} {
		if _, err := console.ParseTokens(bad); err == nil {
			t.Errorf("ParseTokens(%q) succeeded", bad)
		}
	}
	if got, err := console.ParseTokens(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
}

func TestServedUnderAPrefix(t *testing.T) {
	t.Parallel()
	cfg := withToken()
	cfg.Prefix = "/console/"
	e := setup(t, cfg)
	ids := e.orders(1, "o-1")
	e.dead("boom", ids...)
	r := e.get(nil, "/console/")
	mustContain(t, r.body, `href="/console/static/console.css"`, `href="/console/dead-letters"`)
	c := e.client()
	r = e.post(c, "/console/login", url.Values{"token": {testToken}}, nil)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/console/" {
		t.Fatalf("login: %d %s", r.status, r.header.Get("Location"))
	}
	csrf := csrfField.FindStringSubmatch(e.get(c, "/console/").body)
	if csrf == nil {
		t.Fatal("no CSRF token: the session cookie is not sent under the prefix")
	}
	r = e.post(c, "/console/actions/retry", url.Values{"csrf": {csrf[1]}, "scope": {"one"}, "id": {ids[0].String()}}, nil)
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/console/events/") {
		t.Fatalf("retry: %d %s", r.status, r.header.Get("Location"))
	}
}

// On an unordered relay a failed event holds nothing back: the events after
// it are published, and the timeline does not say "Held back by". A dead
// letter has no next attempt; a retrying event has one.
func TestTimelineUnorderedAndNextAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ids := e.orders(3, "o-5")
	e.dead("card declined", ids[0])
	e.exec(`UPDATE {T} SET retry_after = now() WHERE id = $1`, ids[0]) // as the relay leaves it
	e.published(ids[1])
	r := e.get(nil, "/aggregates?type=order&id=o-5")
	mustContain(t, r.body, `<tr class="st-dead">`, `<tr class="st-published">`, `<tr class="st-pending">`)
	mustNotContain(t, r.body, `id="blocker"`, "Held back")

	mustNotContain(t, e.get(nil, "/events/"+ids[0].String()).body, "next attempt")
	e.exec(`UPDATE {T} SET attempts = 2, last_error = 'timeout', retry_after = now() + interval '1 minute' WHERE id = $1`, ids[2])
	mustContain(t, e.get(nil, "/events/"+ids[2].String()).body, `id="state">retrying<`, `id="next-attempt"`)
}
