package outboxcli

import (
	"io"
	"net/url"
	"regexp"
	"strings"
	"sync"
)

// mask replaces every password this package redacts.
const mask = "xxxxx"

var (
	// urlUserinfo matches "scheme://user:password@": the password of any URL,
	// postgres or broker, well-formed or not.
	// The password part stops at quotes and slashes so that a JSON log line
	// holding a URL and, later, an unrelated "@" is not garbled; a password
	// with such characters is not a valid URL, and the literal masking of
	// known passwords covers it.
	urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:@/\s"']*:)[^@\s"'/]*@`)
	// keywordPassword matches password=... in key=value DSNs and URL queries.
	keywordPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)`)
)

// redactDSN returns s with every password in it masked: the userinfo
// password of URLs and password= values. s may be a DSN, a URL or any text
// that embeds one (pgx's and url.Parse's errors quote the DSN they failed on).
func redactDSN(s string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}"+mask+"@")
	return keywordPassword.ReplaceAllString(s, "${1}"+mask)
}

// passwords extracts the passwords from a DSN or broker URL, even a malformed
// one, raw and percent-decoded, so they can be masked wherever they would
// otherwise appear verbatim (a decoded password in an error message).
func passwords(dsn string) []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		out = append(out, p)
		if d, err := url.PathUnescape(p); err == nil && d != p {
			out = append(out, d)
		}
	}
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(dsn, -1) {
		add(strings.Trim(m[2], "'"))
	}
	return out
}

// redactor masks known secrets and anything shaped like a DSN password in
// every line the command writes.
type redactor struct {
	mu      sync.RWMutex
	secrets []string
}

// minSecret is the shortest password masked wherever it appears: masking a
// one- or two-letter password in free text would garble every line, and the
// DSN patterns still catch it where it matters.
const minSecret = 3

// addDSN registers the passwords in a DSN or URL.
func (r *redactor) addDSN(dsn string) {
	ps := passwords(dsn)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ps {
		if len(p) >= minSecret {
			r.secrets = append(r.secrets, p)
		}
	}
	// Longest first, so a secret that contains another is masked whole.
	for i := 1; i < len(r.secrets); i++ {
		for j := i; j > 0 && len(r.secrets[j]) > len(r.secrets[j-1]); j-- {
			r.secrets[j], r.secrets[j-1] = r.secrets[j-1], r.secrets[j]
		}
	}
}

// String masks secrets in s.
func (r *redactor) String(s string) string {
	r.mu.RLock()
	for _, p := range r.secrets {
		s = strings.ReplaceAll(s, p, mask)
	}
	r.mu.RUnlock()
	return redactDSN(s)
}

// redactWriter masks secrets in each Write. Every writer in this package
// writes whole lines (or whole progress redraws) per call, so a secret is
// never split across two writes.
type redactWriter struct {
	w io.Writer
	r *redactor
}

func (rw *redactWriter) Write(p []byte) (int, error) {
	s := rw.r.String(string(p))
	if _, err := io.WriteString(rw.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// templateBraces undoes the escaping of a topic template's braces, which
// net/url applies to a path or query ("/{event_type}" prints as
// "/%7Bevent_type%7D").
var templateBraces = strings.NewReplacer("%7B", "{", "%7D", "}", "%7b", "{", "%7d", "}")

// displayURL is u as logs, errors and the console show it: its password
// masked, a topic template's braces as written.
func displayURL(u *url.URL) string { return templateBraces.Replace(u.Redacted()) }
