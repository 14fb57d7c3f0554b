package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/console"
)

// chromium returns the browser to drive: $CHROMIUM, or the first of the
// usual names on PATH. Without one the test skips, except under CI=true,
// where it fails (.ci/run installs the Debian package chromium).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium on PATH (install the Debian package chromium, or set CHROMIUM)")
	}
	t.Skip("no Chromium on PATH: install the Debian package chromium, or set CHROMIUM")
	return ""
}

// screenshotDir is where the browser test saves its screenshots:
// $OUTBOX_CONSOLE_SCREENSHOTS, or a temporary folder.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("OUTBOX_CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// seedDemo fills the table with what an operator would find on a busy day:
// an hour of published events, a few pending, three dead-letter groups, an
// aggregate blocked behind a dead letter, and an event whose payload, headers
// and error hold markup.
func seedDemo(e *env) (blocked string, hostile uuid.UUID) {
	e.exec(`INSERT INTO {T} (aggregate_type, aggregate_id, event_type, payload, created_at, processed_at)
SELECT 'order', 'o-' || m || '-' || k, (ARRAY['order.created','order.paid','order.shipped','invoice.issued'])[1 + k % 4],
       jsonb_build_object('k', k), now() - m * interval '1 minute' - k * interval '250 ms',
       now() - m * interval '1 minute' - k * interval '250 ms' + interval '40 ms'
FROM generate_series(0, 59) AS m, generate_series(1, 200) AS k
WHERE k <= 90 + 50 * sin(m / 7.0) + 25 * cos(m / 2.5)`)
	e.exec(`INSERT INTO {T} (aggregate_type, aggregate_id, event_type, payload, created_at)
SELECT 'order', 'o-p' || k, (ARRAY['order.created','order.paid','invoice.issued'])[1 + k % 3], '{}', now() - k * interval '120 ms'
FROM generate_series(1, 37) AS k`)
	dead := func(n int, eventType, msg string) []uuid.UUID {
		evs := make([]ev, n)
		for i := range evs {
			evs[i] = ev{aggType: "order", aggID: "o-" + strconv.Itoa(1000+i*7+len(msg)), eventType: eventType,
				payload: `{"order_id":` + strconv.Itoa(1000+i) + `,"amount":42.5}`, headers: `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`}
		}
		ids := e.insert(evs...)
		for i, id := range ids {
			e.dead(strings.ReplaceAll(msg, "#", strconv.Itoa(3+i%5)), id)
		}
		return ids
	}
	pay := dead(12, "order.paid", "nats: publish to events.order.paid: nats: timeout after # attempts")
	dead(5, "invoice.issued", "schema registry: subject invoice-value version # not found")
	dead(2, "order.shipped", "webhook: 410 Gone from https://hooks.example.com/shipping")
	// o-blocked: two published events, a dead letter, three held behind it.
	blocked = "o-blocked"
	first := e.insert(ev{aggType: "order", aggID: blocked, eventType: "order.created"}, ev{aggType: "order", aggID: blocked, eventType: "order.paid"})
	e.published(first...)
	d := e.insert(ev{aggType: "order", aggID: blocked, eventType: "order.shipped", payload: `{"carrier":"acme"}`})
	e.dead("nats: publish to events.order.shipped: nats: timeout after 7 attempts", d...)
	later := e.insert(ev{aggType: "order", aggID: blocked, eventType: "order.delivered"}, ev{aggType: "order", aggID: blocked, eventType: "order.invoiced"},
		ev{aggType: "order", aggID: blocked, eventType: "order.closed"})
	e.held(d[0], later...)
	_ = pay
	// A retrying event whose payload, headers and error hold markup.
	h := e.insert(ev{aggType: "customer", aggID: "c-77", eventType: "customer.updated",
		payload: `{"name":"<script>alert('payload')</script>","bio":"<img src=x onerror=alert(1)>"}`,
		headers: `{"x-note":"<script>alert('header')</script>"}`})
	e.exec(`UPDATE {T} SET attempts = 2, retry_after = now() + interval '1 hour', last_error = $1 WHERE id = $2`,
		`broker rejected <script>alert('error')</script>`, h[0])
	return blocked, h[0]
}

func TestBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	dir := screenshotDir(t)
	e := setup(t, withToken())
	blocked, hostile := seedDemo(e)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 860), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	bctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	defer cancelT()

	var dialogs atomic.Int32
	events := chromedp.Events(bctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range events {
			if err != nil {
				return
			}
			dialogs.Add(1)
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	shot := func(name string) {
		t.Helper()
		b, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := e.srv.URL

	// Sign in through the form.
	do("sign in", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS("span.user")))

	// The overview against the seeded schema.
	do("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("svg.chart")))
	if got := text("#dead"); got != "20" {
		t.Errorf("overview: %s dead letters, want 20", got)
	}
	if got := text("#pending"); got != "38" {
		t.Errorf("overview: %s pending, want 38", got)
	}
	if got := text("#blocked"); got != "1" {
		t.Errorf("overview: %s blocked aggregates, want 1", got)
	}
	shot("overview")

	// Open the largest dead-letter group, retry it and see the count change.
	do("dead letters", chromedp.Navigate(base+"/dead-letters"), chromedp.WaitVisible(chromedp.ID("groups")))
	if got := text("#total"); got != "20" {
		t.Fatalf("dead letters: total %s, want 20", got)
	}
	shot("dead-letters")
	do("open group", chromedp.Click(chromedp.CSS("#groups tbody tr:first-child a.button")), chromedp.WaitVisible(chromedp.ID("members")))
	if got := text("#group-count"); got != "12" {
		t.Fatalf("group: count %s, want 12", got)
	}
	shot("dead-letter-group")
	do("retry group", chromedp.Click(chromedp.ID("retry-group")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if got := text("#confirm-count"); got != "12" {
		t.Errorf("confirmation: %s, want 12", got)
	}
	shot("confirm")
	do("confirm retry", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("flash")))
	if got := text("#flash"); !strings.HasPrefix(got, "Re-queued 12 event(s)") {
		t.Errorf("after retry: %q", got)
	}
	if got := text("#total"); got != "8" {
		t.Errorf("after retry: %s dead letters, want 8", got)
	}
	if n := e.count("dead_at IS NOT NULL AND held_by IS NULL"); n != 8 {
		t.Errorf("table: %d dead letters after the retry, want 8", n)
	}

	// Discard one dead letter from its group.
	do("open group 2", chromedp.Click(chromedp.CSS("#groups tbody tr:first-child a.button")), chromedp.WaitVisible(chromedp.ID("members")))
	before := text("#group-count")
	do("discard one", chromedp.Click(chromedp.CSS("#members tbody tr:first-child a.danger")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("flash")))
	if got := text("#flash"); got != "Discarded 1 dead letter(s)." {
		t.Errorf("after discard: %q", got)
	}
	if got := text("#total"); got != "7" {
		t.Errorf("after discard: %s dead letters, want 7 (group had %s)", got, before)
	}
	if n := e.count("dead_at IS NOT NULL AND held_by IS NULL"); n != 7 {
		t.Errorf("table: %d dead letters after the discard, want 7", n)
	}

	// A dead letter's detail, its payload on an explicit click.
	do("dead letter", chromedp.Navigate(base+"/dead-letters"), chromedp.Click(chromedp.CSS("#groups tbody tr:first-child a.button")),
		chromedp.WaitVisible(chromedp.ID("members")), chromedp.Click(chromedp.CSS("#members tbody tr:first-child td a")),
		chromedp.WaitVisible(chromedp.ID("show-payload")), chromedp.Click(chromedp.ID("show-payload")), chromedp.WaitVisible(chromedp.ID("payload")))
	if got := text("#state"); got != "dead" {
		t.Errorf("dead letter's state: %q", got)
	}
	shot("event")

	// The hostile payload renders as text, on an explicit click.
	do("event", chromedp.Navigate(base+"/events/"+hostile.String()), chromedp.WaitVisible(chromedp.ID("show-payload")))
	do("show payload", chromedp.Click(chromedp.ID("show-payload")), chromedp.WaitVisible(chromedp.ID("payload")))
	if got := text("#payload"); !strings.Contains(got, "<script>alert('payload')</script>") || !strings.Contains(got, "<img src=x onerror=alert(1)>") {
		t.Errorf("payload text = %q", got)
	}
	if got := text("#last-error"); got != "broker rejected <script>alert('error')</script>" {
		t.Errorf("last error text = %q", got)
	}
	if got := text("#headers"); !strings.Contains(got, "<script>alert('header')</script>") {
		t.Errorf("headers text = %q", got)
	}
	nodes, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("script, img").length`))
	if err != nil || nodes != 0 {
		t.Errorf("script or img elements on the event page: %d, %v", nodes, err)
	}
	shot("event-hostile")

	// The blocked aggregate's timeline: a dead letter, three events held
	// behind it.
	do("timeline", chromedp.Navigate(base+"/aggregates?type=order&id="+blocked), chromedp.WaitVisible(chromedp.ID("timeline")))
	states, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline tbody tr")].map(r => r.className)`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(states, ","); got != "st-published,st-published,st-dead,st-held,st-held,st-held" {
		t.Errorf("timeline rows = %s", got)
	}
	shot("timeline")

	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialog(s) opened: stored markup ran", n)
	}
	t.Logf("screenshots in %s", dir)
	_ = console.DefaultSessionTTL
}
