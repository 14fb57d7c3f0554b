// Package configcheck holds the checks every package's tests run on its
// configs: Defaults keeps the documented defaults true (the check reads the
// package's doc comments for the one wording every field uses, "Defaults to
// DefaultX (v)."), and Refused says that a constructor refused a field with
// a *outboxtype.ConfigError naming it.
package configcheck

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/outboxtype"
)

var (
	// named is "DefaultX (v)", qualified or not: the wording of a default.
	named = regexp.MustCompile(`\b((?:[a-z]\w*\.)?Default[A-Z]\w*) \(([^)]*)\)`)
	// bare is a default stated as a literal with no constant ("Default
	// 4000.", "Defaults to 10s."): the wording this check replaces. A zero
	// value that means "off" or "the service's own" ("Defaults to 0: no
	// pacing.", `Defaults to "": Google's service.`) needs no constant.
	bare = regexp.MustCompile(`\bDefault(?:s to)?:? (?:-?[1-9]|-0|0[0-9.]|"[^"])`)
)

// Defaults checks the doc comments of the non-test Go files in dir: every
// "DefaultX (v)" names a constant of consts (by the name the comment spells,
// "outbox.DefaultTopicTemplate" included) whose value v shows, every
// constant of consts is documented so at least once, and no comment states
// a default as a bare literal ("Default 4000.").
func Defaults(t testing.TB, dir string, consts map[string]any) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range comments(t, dir) {
		for _, m := range named.FindAllStringSubmatch(c.text, -1) {
			name, shown := m[1], m[2]
			v, ok := consts[name]
			if !ok {
				t.Errorf("%s: %q names %s, which the test does not know: add it to the test's constants", c.pos, m[0], name)
				continue
			}
			seen[name] = true
			if !shows(shown, v) {
				t.Errorf("%s: %q: %s is %v", c.pos, m[0], name, v)
			}
		}
		if loc := bare.FindStringIndex(c.text); loc != nil {
			end := min(loc[1]+30, len(c.text))
			t.Errorf("%s: %q: state a default as \"Defaults to DefaultX (v).\"", c.pos, c.text[loc[0]:end])
		}
	}
	var missing []string
	for name := range consts {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("no doc comment in %s says \"Defaults to %s (v)\"", dir, name)
	}
}

type comment struct {
	pos  string
	text string // the group's text, lines joined by spaces
}

func comments(t testing.TB, dir string) []comment {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []comment
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range af.Comments {
			out = append(out, commentOf(fset, g))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no doc comment in %s: the check would pass for nothing", dir)
	}
	return out
}

func commentOf(fset *token.FileSet, g *ast.CommentGroup) comment {
	return comment{pos: fset.Position(g.Pos()).String(), text: strings.Join(strings.Fields(g.Text()), " ")}
}

// shows reports whether the text in the parentheses shows v: a duration as
// time.ParseDuration reads it ("5m", "100ms"), a number with optional
// separators and a unit ("1,000,000", "16 MiB", "10 MB", "1 MiB - 4 KiB"),
// a string quoted.
func shows(shown string, v any) bool {
	switch v := v.(type) {
	case time.Duration:
		d, err := time.ParseDuration(shown)
		return err == nil && d == v
	case string:
		s, err := strconv.Unquote(shown)
		return err == nil && s == v
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := number(shown)
		return ok && n == rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := number(shown)
		return ok && n >= 0 && uint64(n) == rv.Uint()
	}
	return fmt.Sprint(v) == shown
}

// number reads "1,000,000", "16 MiB" and a difference of two such, "1 MiB -
// 4 KiB".
func number(s string) (int64, bool) {
	if a, b, ok := strings.Cut(s, " - "); ok {
		x, okx := number(a)
		y, oky := number(b)
		return x - y, okx && oky
	}
	mult := int64(1)
	for unit, m := range map[string]int64{" KiB": 1 << 10, " MiB": 1 << 20, " GiB": 1 << 30, " kB": 1e3, " MB": 1e6} {
		if rest, ok := strings.CutSuffix(s, unit); ok {
			s, mult = rest, m
		}
	}
	n, err := strconv.ParseInt(strings.NewReplacer(",", "", "_", "").Replace(s), 10, 64)
	return n * mult, err == nil
}

// Refused fails the test unless err is a *outboxtype.ConfigError naming
// config (as the error spells it: "nats.Config") and field, whose text
// starts "pkg: Type.Field: ". what says which call returned err.
func Refused(t testing.TB, what string, err error, config, field string) {
	t.Helper()
	var ce *outboxtype.ConfigError
	if !errors.As(err, &ce) || ce.Config != config || ce.Field != field {
		t.Errorf("%s: err = %v (%T), want a *ConfigError naming %s.%s", what, err, err, config, field)
		return
	}
	pkg, typ, ok := strings.Cut(config, ".")
	if !ok {
		pkg, typ = "outbox", config
	}
	if want := pkg + ": " + typ + "." + field + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("%s: err = %q, want it to start %q", what, err, want)
	}
}
