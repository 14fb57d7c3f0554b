package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
)

// page is what every template receives.
type page struct {
	Title    string
	Nav      string // active navigation entry
	Base     string // the console's prefix, ending in /
	Table    string
	User     string // token name when signed in
	CSRF     string // the session's CSRF token (cookie sessions)
	CanAct   bool   // the console accepts actions (tokens set, not read-only)
	ReadOnly bool
	Query    string // the search box's value
	Flash    string
	P        any // the page's own data
}

func (c *Console) newPage(r *http.Request, title, nav string, p any) *page {
	who := c.who(r)
	pg := &page{Title: title, Nav: nav, Base: c.cfg.Prefix, Table: c.admin.Table(), User: who.name,
		CanAct: c.canAct(), ReadOnly: !c.canAct(), P: p}
	if who.session != nil {
		pg.CSRF = who.session.csrf
	}
	return pg
}

// render writes a page; the template is executed into a buffer first, so a
// failure midway cannot leave half a page with a 200.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, pg *page) {
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout", pg); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: cannot render the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorPage struct {
	Status  int
	Message string
}

func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", c.newPage(r, http.StatusText(status), "", errorPage{status, msg}))
}

// dbFail reports a failed query: logged whole, shown without the SQL.
func (c *Console) dbFail(w http.ResponseWriter, r *http.Request, err error) {
	c.log.Error("console: query failed", "path", r.URL.Path, "err", err)
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	case errors.Is(err, outbox.ErrPrivilege): // the console's role lacks it: the text names the GRANT
		status = http.StatusForbidden
	}
	c.fail(w, r, status, strings.TrimPrefix(err.Error(), "outbox: "))
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	c.fail(w, r, http.StatusNotFound, "no such page")
}

// chartMinutes is the overview chart's span.
const chartMinutes = 60

type overviewData struct {
	Status  *admin.Status
	Chart   chart
	Blocked []admin.BlockedAggregate
	Relay   *relayView
}

type relayView struct {
	RelayState
	ReadyText string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	// The three reads are independent: run them side by side, so the page
	// takes as long as the slowest, not their sum.
	var (
		d                       overviewData
		wg                      sync.WaitGroup
		errStatus, errMin, errB error
		perMin                  []admin.MinuteCount
	)
	wg.Add(3)
	go func() { defer wg.Done(); d.Status, errStatus = c.admin.Status(ctx) }()
	go func() { defer wg.Done(); perMin, errMin = c.admin.PublishedPerMinute(ctx, chartMinutes) }()
	go func() { defer wg.Done(); d.Blocked, errB = c.admin.BlockedAggregateList(ctx, blockedLimit) }()
	if c.cfg.Relay != nil {
		rs := c.cfg.Relay(ctx)
		d.Relay = &relayView{RelayState: rs, ReadyText: "ready"}
		if rs.Ready != nil {
			d.Relay.ReadyText = rs.Ready.Error()
		}
	}
	wg.Wait()
	if err := errors.Join(errStatus, errMin, errB); err != nil {
		c.dbFail(w, r, err)
		return
	}
	d.Chart = newChart(perMin)
	c.render(w, r, http.StatusOK, "overview", c.newPage(r, "Overview", "overview", d))
}

// blockedLimit caps the blocked aggregates listed on the overview.
const blockedLimit = 20

type deadLettersData struct {
	Groups      []admin.DeadLetterGroup
	ByErrorOnly bool
	Total       int64
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	byErr := r.URL.Query().Get("by") == "error"
	groups, err := c.admin.DeadLetterGroups(ctx, byErr)
	if err != nil {
		c.dbFail(w, r, err)
		return
	}
	d := deadLettersData{Groups: groups, ByErrorOnly: byErr}
	for _, g := range groups {
		d.Total += g.Count
	}
	pg := c.newPage(r, "Dead letters", "dead", d)
	pg.Flash = flash(r.URL.Query())
	c.render(w, r, http.StatusOK, "deadletters", pg)
}

// groupLimit caps the dead letters listed on a group's page.
const groupLimit = 100

type groupData struct {
	EventType string
	Error     string
	// ErrorSet: the page is the error group Error ("" being the dead
	// letters without an error); else every error of EventType.
	ErrorSet bool
	Count    int64
	Members  []admin.EventInfo
	Limit    int
}

func (c *Console) deadLetterGroup(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	q := r.URL.Query()
	d := groupData{EventType: q.Get("type"), Error: q.Get("error"), ErrorSet: q.Has("error"), Limit: groupLimit}
	sel := groupSelector(d.EventType, d.Error, d.ErrorSet, true)
	n, err := c.admin.Retry(ctx, sel)
	if err != nil {
		c.dbFail(w, r, err)
		return
	}
	d.Count = n
	if d.Members, err = c.admin.DeadLetterGroupMembers(ctx, sel, groupLimit); err != nil {
		c.dbFail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "group", c.newPage(r, "Dead-letter group", "dead", d))
}

type eventData struct {
	E            admin.EventInfo
	Headers      []kv
	Payload      string // set only when shown
	PayloadState string // shown, hidden, login, click
}

type kv struct{ K, V string }

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "not an event id")
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	evs, err := c.admin.Events(ctx, id)
	if err != nil {
		c.dbFail(w, r, err)
		return
	}
	if len(evs) == 0 {
		c.fail(w, r, http.StatusNotFound, "no event "+id.String()+" in the table (never written, or deleted after publishing)")
		return
	}
	d := eventData{E: evs[0], Headers: sortedHeaders(evs[0].Headers)}
	switch {
	case c.cfg.HidePayloads:
		d.PayloadState = "hidden"
	case len(c.cfg.Tokens) > 0 && c.who(r).name == "":
		d.PayloadState = "login"
	case r.URL.Query().Get("payload") == "1":
		d.PayloadState, d.Payload = "shown", prettyJSON(d.E.Payload)
	default:
		d.PayloadState = "click"
	}
	d.E.Payload = nil // never reaches the template unless shown above
	pg := c.newPage(r, "Event "+id.String(), "", d)
	pg.Flash = flash(r.URL.Query())
	c.render(w, r, http.StatusOK, "event", pg)
}

// timelineLimit caps an aggregate's events on its timeline.
const timelineLimit = 200

type timelineData struct {
	AggregateType string
	AggregateID   string
	Events        []admin.EventInfo
	Limit         int
	Window        int
	// Blocker is the earliest failed event (dead letter or waiting for its
	// retry) that holds later events of the aggregate back: an ordered relay
	// parks them behind it (held_by). An unordered relay holds nothing
	// back, so a failed event alone is no blocker. Behind counts the
	// unprocessed events after it.
	Blocker *admin.EventInfo
	Behind  int
}

func (c *Console) timeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := timelineData{AggregateType: q.Get("type"), AggregateID: q.Get("id"), Limit: timelineLimit, Window: admin.DefaultTimelineWindow}
	if d.AggregateID == "" {
		c.fail(w, r, http.StatusBadRequest, "an aggregate id is needed (search for one)")
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	evs, err := c.admin.AggregateTimeline(ctx, admin.TimelineQuery{AggregateType: d.AggregateType, AggregateID: d.AggregateID, Limit: timelineLimit})
	if err != nil {
		c.dbFail(w, r, err)
		return
	}
	d.Events = evs
	holders := map[uuid.UUID]bool{}
	for _, e := range evs {
		if e.HeldBy != nil {
			holders[*e.HeldBy] = true
		}
	}
	for i := range evs {
		e := &evs[i]
		if d.Blocker == nil && holders[e.ID] && (e.State == admin.StateDead || e.State == admin.StateRetrying) {
			d.Blocker = e
			continue
		}
		if d.Blocker != nil && e.State != admin.StatePublished {
			d.Behind++
		}
	}
	pg := c.newPage(r, "Aggregate "+d.AggregateID, "", d)
	pg.Query = d.AggregateID
	c.render(w, r, http.StatusOK, "timeline", pg)
}

func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" {
		c.render(w, r, http.StatusOK, "search", c.newPage(r, "Search", "", nil))
		return
	}
	if id, err := uuid.Parse(q); err == nil {
		ctx, cancel := c.ctx(r)
		defer cancel()
		evs, err := c.admin.Events(ctx, id)
		if err != nil {
			c.dbFail(w, r, err)
			return
		}
		if len(evs) > 0 {
			http.Redirect(w, r, c.cfg.Prefix+"events/"+id.String(), http.StatusSeeOther)
			return
		}
		// Not an event id: it may still be an aggregate's.
	}
	http.Redirect(w, r, c.cfg.Prefix+"aggregates?id="+url.QueryEscape(q), http.StatusSeeOther)
}

// flash is the message after an action, from the redirect's query: built
// from numbers only, never from text the query carries.
func flash(q url.Values) string {
	n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
	switch q.Get("done") {
	case "retry":
		return fmt.Sprintf("Re-queued %d event(s): the relay publishes them again now.", n)
	case "discard":
		released, _ := strconv.ParseInt(q.Get("released"), 10, 64)
		msg := fmt.Sprintf("Discarded %d dead letter(s).", n)
		if released > 0 {
			msg += fmt.Sprintf(" %d held event(s) released.", released)
		}
		return msg
	}
	return ""
}

func sortedHeaders(h map[string]string) []kv {
	out := make([]kv, 0, len(h))
	for k, v := range h {
		out = append(out, kv{k, v})
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].K < out[j-1].K; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func prettyJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

// ago formats how long ago t was.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return age(time.Since(t)) + " ago"
}

// age formats a duration for people.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
