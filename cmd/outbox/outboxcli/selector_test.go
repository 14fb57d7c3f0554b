package outboxcli

import (
	"strings"
	"testing"
)

// --error-group takes a group whole. A prefix, or the copy of a clipped
// error, matches no group: it is refused with exit 2, naming the groups it
// could be, and nothing is done. "" is the group of the dead letters
// without an error, not every error.
func TestErrorGroupSelection(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	a := f.write("a.happened", 2)
	b := f.write("b.happened", 1)
	blank := f.write("a.happened", 1)
	long := "webhook: POST https://hooks.example.com/…: " + strings.Repeat("x", 200) + " 400 Bad Request: amount is negative"
	f.deadLetter(a, "offset 17 out of range for partition 3")
	f.deadLetter(b, long)
	f.deadLetter(blank, "")
	requeued := func() int { return f.count("dead_at IS NULL") }

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"prefix", []string{"retry", "--error-group", "offset <n> out of range"},
			[]string{`no dead-letter group has this error`, `it could be "offset <n> out of range for partition <n>"`}},
		{"clipped copy", []string{"dead-letters", "discard", "--error-group", "webhook: POST https://hooks.example.com/…: xxxx … amount is negative"},
			[]string{`it could be "webhook: POST`}},
		{"unknown", []string{"retry", "--error-group", "nope", "--dry-run"},
			[]string{`--error-group "nope": no dead-letter group has this error; the groups are`, `"" (the dead letters without an error)`}},
		{"other type", []string{"retry", "--type", "b.happened", "--error-group", "offset <n> out of range for partition <n>"},
			[]string{`of type "b.happened"`}},
		{"no empty group of the type", []string{"retry", "--type", "b.happened", "--error-group", ""},
			[]string{`--error-group "" (the dead letters without an error): no dead-letter group of type "b.happened"`}},
	} {
		r := run(t, vars, tc.args...)
		wantExit(t, r, ExitUsage)
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, r.stderr)
			}
		}
		if n := requeued(); n != 0 {
			t.Fatalf("%s: %d rows changed", tc.name, n)
		}
	}

	// The empty group is its own: one dead letter, not every one of a.happened.
	r := run(t, vars, "retry", "--type", "a.happened", "--error-group", "")
	wantExit(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, "re-queued 1 event(s)") || requeued() != 1 || f.count("dead_at IS NULL AND id = $1", blank[0]) != 1 {
		t.Errorf("retry --error-group \"\": %s; %d re-queued", r, requeued())
	}
	// The group table shows each group whole, as --error-group takes it.
	r = run(t, vars, "dead-letters", "--group-by", "error")
	wantExit(t, r, ExitOK)
	var shown string
	for _, line := range strings.Split(r.stdout, "\n") {
		if i := strings.Index(line, "webhook: POST"); i >= 0 {
			shown = strings.TrimSpace(line[i:])
		}
	}
	r = run(t, vars, "dead-letters", "discard", "--error-group", shown)
	wantExit(t, r, ExitOK)
	if f.count("id = $1", b[0]) != 0 {
		t.Errorf("discard --error-group %q (copied from the table) did not discard:\n%s", shown, r)
	}
}

// The dead-letter list keeps an error's start and its end, where a wrapped
// error says what went wrong.
func TestDeadLettersShowTheErrorsEnd(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	ids := f.write("a.happened", 1)
	f.deadLetter(ids, "webhook: POST https://hooks.example.com/…: "+strings.Repeat("context\t", 40)+"400 Bad Request: amount is negative")
	r := run(t, vars, "dead-letters")
	wantExit(t, r, ExitOK)
	if !strings.Contains(r.stdout, "webhook: POST https://hooks") || !strings.Contains(r.stdout, " … ") ||
		!strings.Contains(r.stdout, "400 Bad Request: amount is negative") {
		t.Errorf("dead-letters lost the error's start or end:\n%s", r.stdout)
	}
}

func TestClipError(t *testing.T) {
	t.Parallel()
	if got := clipError("short\terror\nhere", 40); got != "short error; here" {
		t.Errorf("short error = %q", got)
	}
	s := strings.Repeat("é", 100) + "THE END"
	got := clipError(s, 60)
	if n := len([]rune(got)); n > 60 || !strings.HasSuffix(got, "THE END") || !strings.HasPrefix(got, "éé") {
		t.Errorf("clipError = %q (%d runes)", got, n)
	}
}
