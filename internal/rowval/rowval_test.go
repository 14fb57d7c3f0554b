package rowval

import (
	"maps"
	"strings"
	"testing"
)

func TestHeaders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{in: ``, want: nil},
		{in: `null`, want: nil},
		{in: ` {} `, want: map[string]string{}},
		{in: `{"a": "x", "b": 3, "c": true, "d": null, "e": {"f": [1, 2.50]}, "g": "", "h": -1e3}`,
			want: map[string]string{"a": "x", "b": "3", "c": "true", "e": `{"f":[1,2.50]}`, "g": "", "h": "-1e3"}},
		{in: `{"a": "\u00e9\n"}`, want: map[string]string{"a": "é\n"}},
		{in: `[1, 2]`, err: "want a JSON object, got an array"},
		{in: `"x"`, err: "got a string"},
		{in: `42`, err: "got a number"},
		{in: `true`, err: "got a boolean"},
		{in: `{"a": }`, err: "want a JSON object"},
	} {
		got, err := Headers([]byte(c.in))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Headers(%s) = %v, %v; want an error containing %q", c.in, got, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("Headers(%s): %v", c.in, err)
		case c.err == "" && !maps.Equal(got, c.want):
			t.Errorf("Headers(%s) = %v, want %v", c.in, got, c.want)
		}
	}
}

// FuzzHeaders: any column value gives headers or an error, never a panic,
// and the headers of an object hold one string per non-null key.
func FuzzHeaders(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `{"retries":3}`, `{"a":{"b":[1,null]}}`, `null`, `[1]`, `{"a":null}`, `{"\u0000":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Headers(b)
		if err != nil && h != nil {
			t.Fatalf("headers %v beside error %v", h, err)
		}
	})
}
