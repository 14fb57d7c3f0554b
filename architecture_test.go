package outbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitecturePackageTable keeps ARCHITECTURE.md's package table true:
// every directory of the repository holding a non-test Go file (nested
// modules included) has a row, and every directory a row names exists. A
// row's first cell names directories in backquotes, from the repository's
// root (`outbox` is the root itself); a directory without Go code
// (`migrations/`) may have a row too.
func TestArchitecturePackageTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := packageRows(t, string(doc))
	named := map[string]bool{}
	for _, dir := range rows {
		named[dir] = true
		if info, err := os.Stat(filepath.FromSlash(dir)); err != nil || !info.IsDir() {
			t.Errorf("ARCHITECTURE.md's package table names %s, which is not a directory of the repository", dir)
		}
	}
	dirs := goPackageDirs(t)
	if len(dirs) < 20 {
		t.Fatalf("found %d directories with Go code, want the repository's: %q", len(dirs), dirs)
	}
	for _, dir := range dirs {
		if !named[dir] {
			t.Errorf("ARCHITECTURE.md's package table has no row for %s (a directory with Go code)", dir)
		}
	}
}

// packageRows returns the directories named by the first cells of the
// table in the "## Packages" section, in their order.
func packageRows(t *testing.T, doc string) []string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Packages\n")
	if !ok {
		t.Fatal(`ARCHITECTURE.md has no "## Packages" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([^`]+)`")
	var dirs []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue // not a row, the header or the separator
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			dir := strings.TrimSuffix(m[1], "/")
			if dir == "outbox" {
				dir = "."
			}
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) == 0 {
		t.Fatal("ARCHITECTURE.md's package table has no rows")
	}
	return dirs
}

// goPackageDirs walks the repository as the go command would see its
// packages (skipping testdata and directories starting with . or _) and
// returns, slash-separated from the root, every directory holding a
// non-test .go file.
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			if dir := filepath.ToSlash(filepath.Dir(path)); !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}
