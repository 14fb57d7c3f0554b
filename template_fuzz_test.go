package outbox_test

import (
	"strings"
	"testing"

	"github.com/pgoutbox/outbox"
)

// FuzzParseTopicTemplate: a template either fails to parse with an error
// naming it, or parses into one that renders. Rendered with each field set to
// its own placeholder it gives its source back (every brace is a
// placeholder's), and rendered with plain values it holds no brace.
func FuzzParseTopicTemplate(f *testing.F) {
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := outbox.ParseTopicTemplate(src)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "outbox: topic template ") {
				t.Fatalf("ParseTopicTemplate(%q): error %q does not name the template", src, err)
			}
			return
		}
		want := src
		if want == "" {
			want = outbox.DefaultTopicTemplate
		}
		if tmpl.String() != want {
			t.Fatalf("String() = %q, want %q", tmpl.String(), want)
		}
		self := &outbox.Message{EventType: "{event_type}", AggregateType: "{aggregate_type}", AggregateID: "{aggregate_id}"}
		if got := tmpl.Render(self); got != want {
			t.Fatalf("%q rendered with its placeholders = %q", src, got)
		}
		plain := tmpl.Render(&outbox.Message{EventType: "e", AggregateType: "a", AggregateID: "1"})
		if strings.ContainsAny(plain, "{}") {
			t.Fatalf("%q rendered = %q: a brace was not a placeholder's", src, plain)
		}
		again, err := outbox.ParseTopicTemplate(tmpl.String())
		if err != nil || again.Render(self) != want {
			t.Fatalf("%q: its String() does not parse back: %v", src, err)
		}
	})
}
