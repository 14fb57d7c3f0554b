package brokerurl

import (
	"net/url"
	"strings"
	"testing"
)

// canary replaces a fuzzed URL's password: errors must never show it.
const canary = "Pw-CANARY-3f9c"

// withCanary parses raw and, when it has a password, replaces it with
// canary; ok is false for what net/url refuses, or input already holding
// the canary.
func withCanary(raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	if err != nil || strings.Contains(raw, "CANARY") {
		return nil, false
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), canary)
	}
	return u, true
}

// FuzzEach: Each hands every option to fn once, refuses an option given more
// than once, and its errors name the package and the option, never the
// password.
func FuzzEach(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw string) {
		u, ok := withCanary(raw)
		if !ok {
			return
		}
		q := u.Query()
		dup, twice := "", false
		for k, vs := range q {
			if len(vs) > 1 {
				dup, twice = k, true
			}
		}
		seen := map[string]int{}
		err := Each("x", u, func(name, v string) string {
			seen[name]++
			if got := q[name]; len(got) != 1 || got[0] != v {
				t.Fatalf("fn(%q, %q), but the query holds %q", name, v, got)
			}
			return ""
		})
		switch {
		case twice && err == nil:
			t.Fatalf("%q: option %q given more than once was accepted", raw, dup)
		case !twice && err != nil:
			t.Fatalf("%q: %v, with no option given twice", raw, err)
		case err == nil && len(seen) != len(q):
			t.Fatalf("%q: fn saw %v, the query holds %v", raw, seen, q)
		}
		for name, n := range seen {
			if n != 1 {
				t.Fatalf("fn saw %q %d times", name, n)
			}
		}
		if err != nil && (!strings.HasPrefix(err.Error(), "x: URL ") || strings.Contains(err.Error(), canary)) {
			t.Fatalf("%q: error %q: want it to start with the package and never show the password", raw, err)
		}
		// A refusal becomes the error, naming the option.
		err = Each("x", u, func(name, v string) string { return "refused" })
		if len(q) > 0 && (err == nil || !strings.Contains(err.Error(), "option ") || strings.Contains(err.Error(), canary)) {
			t.Fatalf("%q: refusing every option: %v", raw, err)
		}
		if len(q) == 0 && err != nil {
			t.Fatalf("%q: no option, yet %v", raw, err)
		}
	})
}

// FuzzKnown: an option outside the list is refused by name; the listed ones
// pass; the password never shows.
func FuzzKnown(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw string) {
		u, ok := withCanary(raw)
		if !ok {
			return
		}
		err := Known("x", u, "a", "topic")
		unknown := false
		for k := range u.Query() {
			unknown = unknown || (k != "a" && k != "topic")
		}
		if unknown != (err != nil) {
			t.Fatalf("%q: Known = %v, unknown option present: %v", raw, err, unknown)
		}
		if err != nil && (!strings.Contains(err.Error(), "unknown option") || strings.Contains(err.Error(), canary)) {
			t.Fatalf("%q: error %q", raw, err)
		}
	})
}
