package brokerurl

import (
	"crypto/tls"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestEach(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	err := Each("x", mustURL(t, "x://u:secret@h?a=1&b=2"), func(name, v string) string {
		seen[name] = v
		return ""
	})
	if err != nil || len(seen) != 2 || seen["a"] != "1" || seen["b"] != "2" {
		t.Fatalf("Each: err = %v, seen %v", err, seen)
	}
	for raw, want := range map[string]string{
		"x://u:secret@h?a=1&a=2": `x: URL x://u:xxxxx@h?a=1&a=2: option a="2": given more than once`,
		"x://u:secret@h?b=oops":  `x: URL x://u:xxxxx@h?b=oops: option b="oops": want a number`,
	} {
		err := Each("x", mustURL(t, raw), func(string, string) string { return "want a number" })
		if err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %s", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error repeats the password: %v", raw, err)
		}
	}
}

func TestKnown(t *testing.T) {
	t.Parallel()
	if err := Known("x", mustURL(t, "x://h?a=1&b=2"), "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	err := Known("x", mustURL(t, "x://u:secret@h?a=1&d=2"), "a", "b")
	if want := `x: URL x://u:xxxxx@h?a=1&d=2: unknown option "d"`; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}

func TestReadableAndTLSFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := Readable(filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("Readable accepts a missing file")
	}
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Readable(notPEM); err != nil {
		t.Errorf("Readable(%s): %v", notPEM, err)
	}
	for _, c := range []struct {
		ca, cert, key, want string
	}{
		{ca: filepath.Join(dir, "missing.pem"), want: "tls_ca: open "},
		{ca: notPEM, want: "tls_ca: " + notPEM + " holds no PEM certificate"},
		{cert: notPEM, want: "tls_cert and tls_key go together"},
		{cert: notPEM, key: notPEM, want: "tls_cert, tls_key: "},
	} {
		err := AddTLSFiles(&tls.Config{}, c.ca, c.cert, c.key)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("AddTLSFiles(%q, %q, %q) = %v, want %q...", c.ca, c.cert, c.key, err, c.want)
		}
	}
	if err := AddTLSFiles(&tls.Config{}, "", "", ""); err != nil {
		t.Errorf("no files: %v", err)
	}
}
