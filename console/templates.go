package console

import (
	"embed"
	"html/template"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/admin"
)

//go:embed templates/*.html
var templateFS embed.FS

// staticFS holds static/, served at /static/.
//
//go:embed static
var staticFS embed.FS

// pages holds one template set per page: the layout plus the page's
// "content", so every page defines the same block names.
var pages = map[string]*template.Template{}

var funcs = template.FuncMap{
	"ago": ago,
	"agoPtr": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return ago(*t)
	},
	"ts": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"tsPtr": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"age": age,
	"trunc": func(n int, s string) string {
		if r := []rune(s); len(r) > n {
			return string(r[:n]) + "…"
		}
		return s
	},
	"oneline": func(s string) string { return strings.Join(strings.Fields(s), " ") },
	"short":   func(s string) string { return s[:min(len(s), 8)] },
	"isDead":  func(s admin.EventState) bool { return s == admin.StateDead },
	// Only a retrying event has a next attempt: a dead letter's
	// retry_after is left from its last failure.
	"isRetrying": func(s admin.EventState) bool { return s == admin.StateRetrying },
	"unprocessed": func(s admin.EventState) bool {
		return s != admin.StatePublished
	},
	"f1": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
}

func init() {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n))
	}
}
