// Package docs holds the manuals; its test checks every Markdown link of the
// repository.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLinks fails on a relative link, in any Markdown file of the module,
// whose file does not exist or whose #anchor is no heading (or explicit
// anchor) of the file it points to. Moving a section must move its links.
func TestLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := markdownFiles(t, root)
	if len(files) < 5 {
		t.Fatalf("found %d Markdown files under %s, want the repository's", len(files), root)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path]
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range links(string(b)) {
			if isExternal(l.target) {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(l.target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, path)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !anchorsOf(dest)[anchor] {
				t.Errorf("%s:%d: link %q: no heading with anchor #%s in %s", rel, l.line, l.target, anchor, filepath.Base(dest))
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d relative links, want the repository's (is the parser broken?)", checked)
	}
}

// markdownFiles lists the .md files under root, outside .git and nested
// modules' caches.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func isExternal(target string) bool {
	for _, p := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(target, p) {
			return true
		}
	}
	return false
}

type link struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	explicitID = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	anchorDrop = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// links returns the inline and reference-style link targets of a Markdown
// document, outside fenced code blocks and code spans.
func links(md string) []link {
	var out []link
	fence := false
	for i, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{i + 1, m[1]})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

// headingAnchors returns GitHub's anchors for a document's headings (a
// repeated heading gets -1, -2...) and its explicit <a id> anchors.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range explicitID.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		a := githubAnchor(strings.TrimSpace(strings.TrimLeft(line, "#")))
		if n := seen[a]; n > 0 {
			anchors[a+"-"+itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// githubAnchor is GitHub's heading slug: the text of links kept, lower
// case, punctuation dropped, spaces to dashes.
func githubAnchor(title string) string {
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	s := strings.ToLower(title)
	s = anchorDrop.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func TestAnchorsAndLinks(t *testing.T) {
	t.Parallel()
	a := headingAnchors("# Title\n## The `outbox` command\n```\n# not a heading\n```\n## Notes\n### Notes\n<a id=\"x-y\"></a>\n## See [docs](docs.md)\n")
	for _, want := range []string{"title", "the-outbox-command", "notes", "notes-1", "x-y", "see-docs"} {
		if !a[want] {
			t.Errorf("anchor %q missing from %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block became a heading")
	}
	l := links("see [a](b.md#c) and `[x](y)`\n```\n[z](w)\n```\n[ref]: ../r.md\n[web](https://example.com \"t\")\n")
	var got []string
	for _, x := range l {
		got = append(got, x.target)
	}
	if strings.Join(got, " ") != "b.md#c ../r.md https://example.com" {
		t.Errorf("links = %q", got)
	}
}

// readmeMaxLines keeps README a front page: what it is, install, the quick
// start, the map of the docs, the library, testing, sources and brokers.
// The rest belongs in docs/.
const readmeMaxLines = 250

func TestREADMELength(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move a section to docs/ and link it from README's Documentation", n, readmeMaxLines)
	}
}
