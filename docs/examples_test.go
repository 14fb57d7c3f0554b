package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExamplesArePublic fails when a file holding Example functions, which
// godoc shows users to copy, imports one of the module's internal packages
// (a copy would fail: "use of internal package ... not allowed"), opens the
// "pgx" database/sql driver without importing it, or builds a connection
// string by concatenation (a DSN may have no "?" to append "&..." to).
func TestExamplesArePublic(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if !hasExample(f) {
			return nil
		}
		files++
		rel, _ := filepath.Rel(root, path)
		for _, msg := range examplesProblems(f, fset) {
			t.Errorf("%s: %s", rel, msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("found %d files with examples, want the repository's", files)
	}
}

func hasExample(f *ast.File) bool {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
			return true
		}
	}
	return false
}

// examplesProblems lists what keeps a file's examples from being copied.
func examplesProblems(f *ast.File, fset *token.FileSet) []string {
	var problems []string
	imports := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		imports[path] = true
		if strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
			problems = append(problems, "imports "+path+": examples import only public packages, so that a copy compiles")
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if ok && sel.Sel.Name == "Open" && len(n.Args) > 0 {
				if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Value == `"pgx"` && !imports["github.com/jackc/pgx/v5/stdlib"] {
					problems = append(problems, "line "+strconv.Itoa(fset.Position(n.Pos()).Line)+`: sql.Open("pgx", ...) without importing github.com/jackc/pgx/v5/stdlib (sql: unknown driver "pgx")`)
				}
			}
		case *ast.BinaryExpr:
			if n.Op != token.ADD {
				return true
			}
			for _, side := range []ast.Expr{n.X, n.Y} {
				lit, ok := side.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				if s, err := strconv.Unquote(lit.Value); err == nil && (strings.HasPrefix(s, "&") || strings.HasPrefix(s, "?")) && strings.Contains(s, "=") {
					problems = append(problems, "line "+strconv.Itoa(fset.Position(n.Pos()).Line)+": builds a connection string by concatenation; use net/url or pgx.ParseConfig")
				}
			}
		}
		return true
	})
	return problems
}

func TestExamplesProblems(t *testing.T) {
	t.Parallel()
	src := `package x_test
import (
	"database/sql"
	"github.com/pgoutbox/outbox/internal/testdb"
)
func Example() {
	db, _ := sql.Open("pgx", testdb.URL()+"&search_path=x")
	_ = db
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := examplesProblems(f, fset)
	want := []string{"imports github.com/pgoutbox/outbox/internal/testdb", `without importing github.com/jackc/pgx/v5/stdlib`, "by concatenation"}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d = %q, want it to mention %q", i, got[i], w)
		}
	}
}
