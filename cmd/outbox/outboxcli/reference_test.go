package outboxcli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var updateReference = flag.Bool("update-reference", false, "rewrite docs/CLI.md's reference from the commands' help")

// referencePath is the CLI manual; its part between the markers is the
// commands' help, verbatim.
const (
	referencePath  = "../../../docs/CLI.md"
	referenceBegin = "<!-- BEGIN generated reference: go test ./cmd/outbox/outboxcli -run TestCLIReference -update-reference -->\n"
	referenceEnd   = "<!-- END generated reference -->\n"
)

// cliReference renders `outbox --help` and every command's --help as
// Markdown. Each command's help ends with the exit codes, printed once,
// under `outbox --help`.
func cliReference(t *testing.T) string {
	t.Helper()
	help := func(args ...string) string {
		var out, errOut bytes.Buffer
		code := newCLI(&out, &errOut, env(nil)).main(context.Background(), args)
		if code != ExitOK || errOut.Len() != 0 {
			t.Fatalf("outbox %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	var b strings.Builder
	section := func(title, text string) {
		fmt.Fprintf(&b, "### `%s`\n\n```text\n%s```\n\n", title, text)
	}
	section("outbox --help", help("--help"))
	for _, cmd := range commands() {
		text := help(cmd.name, "--help")
		section("outbox "+cmd.name, strings.TrimSuffix(text, "\n"+exitCodesHelp))
		for _, sub := range cmd.subs {
			text := help(cmd.name, sub.name, "--help")
			section("outbox "+cmd.name+" "+sub.name, strings.TrimSuffix(text, "\n"+exitCodesHelp))
		}
	}
	return b.String()
}

// TestCLIReference fails when docs/CLI.md's reference and the commands'
// help differ; -update-reference rewrites it.
func TestCLIReference(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok := strings.Cut(string(doc), referenceBegin)
	if !ok {
		t.Fatalf("docs/CLI.md: no line %q", strings.TrimSpace(referenceBegin))
	}
	body, tail, ok := strings.Cut(rest, referenceEnd)
	if !ok {
		t.Fatalf("docs/CLI.md: no line %q", strings.TrimSpace(referenceEnd))
	}
	want := cliReference(t)
	if body == want {
		return
	}
	if *updateReference {
		if err := os.WriteFile(referencePath, []byte(head+referenceBegin+want+referenceEnd+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("docs/CLI.md's reference differs from the commands' help at %s; regenerate it: go test ./cmd/outbox/outboxcli -run TestCLIReference -update-reference",
		firstLineDiff(body, want))
}

func firstLineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var x, y string
		if i < len(g) {
			x = g[i]
		}
		if i < len(w) {
			y = w[i]
		}
		if x != y {
			return fmt.Sprintf("line %d of the reference: docs %q, help %q", i+1, x, y)
		}
	}
	return "the end"
}
