package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/admin"
)

// target is what an action applies to: one event (scope "one", ID) or a
// dead-letter group (scope "group"): EventType ("" for any type) and, when
// ErrorSet, the error group Error, where "" is the group of the dead letters
// that recorded no error; without ErrorSet, any error. The scope is explicit
// so that a request missing its id can never widen into a group, and the
// error is a parameter present or absent so that an empty error never
// widens into every error.
type target struct {
	Action    string // retry or discard
	Scope     string // one or group
	ID        string
	EventType string
	Error     string
	ErrorSet  bool
}

func (t target) group() bool { return t.Scope == "group" }

// selector is t as the Admin selector, or an error to show.
func (t target) selector(dryRun bool) (admin.RetrySelector, error) {
	switch {
	case t.Action != "retry" && t.Action != "discard":
		return admin.RetrySelector{}, fmt.Errorf("unknown action %q", t.Action)
	case t.Scope != "one" && t.Scope != "group":
		return admin.RetrySelector{}, fmt.Errorf("unknown scope %q (want one or group)", t.Scope)
	}
	if !t.group() {
		id, err := uuid.Parse(t.ID)
		if err != nil {
			return admin.RetrySelector{}, fmt.Errorf("not an event id: %q", t.ID)
		}
		return admin.RetrySelector{IDs: []uuid.UUID{id}, DryRun: dryRun}, nil
	}
	return groupSelector(t.EventType, t.Error, t.ErrorSet, dryRun), nil
}

// groupSelector selects the dead letters of eventType ("" for any) and, when
// errorSet, of the error group errorGroup ("" being the group without an
// error).
func groupSelector(eventType, errorGroup string, errorSet, dryRun bool) admin.RetrySelector {
	return admin.RetrySelector{EventType: eventType, ErrorGroup: errorGroup, NoError: errorSet && errorGroup == "",
		All: eventType == "" && !errorSet, DryRun: dryRun}
}

// String describes the selector for the audit log.
func (t target) String() string {
	if !t.group() {
		return "id=" + t.ID
	}
	typ, grp := "any", "any"
	if t.EventType != "" {
		typ = fmt.Sprintf("%q", t.EventType)
	}
	if t.ErrorSet {
		grp = fmt.Sprintf("%q", t.Error)
	}
	return "event_type=" + typ + " error_group=" + grp
}

func targetOf(v url.Values, action string) target {
	return target{Action: action, Scope: v.Get("scope"), ID: v.Get("id"), EventType: v.Get("type"),
		Error: v.Get("error"), ErrorSet: v.Has("error")}
}

type confirmData struct {
	T      target
	Count  int64
	Reason string // why the action cannot be taken here, if it cannot
}

// confirm shows what an action would do (a dry run) and the form that does
// it. It changes nothing.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	t := targetOf(q, q.Get("action"))
	sel, err := t.selector(true)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	d := confirmData{T: t}
	if t.Action == "retry" {
		d.Count, err = c.admin.Retry(ctx, sel)
	} else {
		var res admin.DiscardResult
		res, err = c.admin.Discard(ctx, admin.DiscardSelector(sel))
		d.Count = res.Discarded
	}
	if err != nil {
		c.dbFail(w, r, err)
		return
	}
	switch {
	case !c.canAct():
		d.Reason = "This console is read-only."
	case c.who(r).name == "":
		d.Reason = "Sign in with a console token to act."
	case d.Count == 0:
		d.Reason = "Nothing to do: no event matches."
	}
	c.render(w, r, http.StatusOK, "confirm", c.newPage(r, "Confirm", "dead", d))
}

// action runs a confirmed retry or discard through admin.Admin, logs it and
// redirects to a page that shows the count.
func (c *Console) action(w http.ResponseWriter, r *http.Request) {
	who := c.who(r)
	switch {
	case !c.canAct():
		c.fail(w, r, http.StatusForbidden, "this console is read-only")
		return
	case who.name == "":
		c.fail(w, r, http.StatusUnauthorized, "sign in with a console token to act")
		return
	case !checkCSRF(r, who):
		c.fail(w, r, http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "cannot read the form")
		return
	}
	action := "retry"
	if r.URL.Path == "/actions/discard" {
		action = "discard"
	}
	t := targetOf(r.PostForm, action)
	sel, err := t.selector(false)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	next := url.Values{"done": {action}}
	var n, released int64
	if action == "retry" {
		n, err = c.admin.Retry(ctx, sel)
	} else {
		var res admin.DiscardResult
		res, err = c.admin.Discard(ctx, admin.DiscardSelector(sel))
		n, released = res.Discarded, res.Released
		next.Set("released", strconv.FormatInt(released, 10))
	}
	if err != nil {
		c.log.Error("console: action failed", "token", who.name, "action", action, "selector", t.String(), "err", err)
		c.dbFail(w, r, err)
		return
	}
	c.log.Info("console action", "token", who.name, "action", action, "selector", t.String(),
		"count", n, "released", released, "remote", r.RemoteAddr)
	next.Set("n", strconv.FormatInt(n, 10))
	dest := c.cfg.Prefix + "dead-letters?" + next.Encode()
	if action == "retry" && !t.group() {
		dest = c.cfg.Prefix + "events/" + sel.IDs[0].String() + "?" + next.Encode()
	}
	http.Redirect(w, r, dest, http.StatusSeeOther)
}

type loginData struct {
	Failed    bool
	Throttled string // why the sign-in was not even checked
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if len(c.cfg.Tokens) == 0 {
		c.fail(w, r, http.StatusNotFound, "no console token is configured: the console is read-only")
		return
	}
	c.render(w, r, http.StatusOK, "login", c.newPage(r, "Sign in", "", loginData{}))
}

// login exchanges a token for a session cookie. Cross-origin posts are
// refused before this (login CSRF); wrong tokens are throttled.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if len(c.cfg.Tokens) == 0 {
		c.fail(w, r, http.StatusNotFound, "no console token is configured: the console is read-only")
		return
	}
	name, wait := c.checkToken(r, strings.TrimSpace(r.PostFormValue("token")))
	if wait > 0 {
		c.tooMany(w, r, wait, "login")
		return
	}
	if name == "" {
		c.log.Warn("console login refused", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", c.newPage(r, "Sign in", "", loginData{Failed: true}))
		return
	}
	id, _ := c.newSession(name)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: c.cfg.Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secureRequest(r), MaxAge: int(c.cfg.SessionTTL.Seconds())})
	c.log.Info("console login", "token", name, "remote", r.RemoteAddr)
	http.Redirect(w, r, c.cfg.Prefix, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	who := c.who(r)
	if who.session != nil {
		if !checkCSRF(r, who) {
			c.fail(w, r, http.StatusForbidden, "missing or wrong CSRF token")
			return
		}
		ck, _ := r.Cookie(cookieName)
		c.mu.Lock()
		delete(c.sessions, ck.Value)
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: c.cfg.Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secureRequest(r), MaxAge: -1})
	http.Redirect(w, r, c.cfg.Prefix, http.StatusSeeOther)
}
