package deploy

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dockerfile is what the tests read from the Dockerfile.
type dockerfile struct {
	From       []string // image of each stage
	User       string   // last USER
	Entrypoint string   // raw ENTRYPOINT argument
	Cmd        string   // raw CMD argument
	Env        map[string]string
	BuildEnv   []string // NAME=value before "go build"
	BuildArgs  []string // go build's arguments
}

// parseDockerfile reads the instructions, joining continuation lines.
func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	d := dockerfile{Env: map[string]string{}}
	var logical []string
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, "../Dockerfile")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur += s + " "
			continue
		}
		logical = append(logical, cur+line)
		cur = ""
	}
	for _, l := range logical {
		instr, arg, _ := strings.Cut(l, " ")
		arg = strings.TrimSpace(arg)
		switch strings.ToUpper(instr) {
		case "FROM":
			d.From = append(d.From, strings.Fields(arg)[0])
		case "USER":
			d.User = arg
		case "ENTRYPOINT":
			d.Entrypoint = arg
		case "CMD":
			d.Cmd = arg
		case "ENV":
			k, v, _ := strings.Cut(arg, "=")
			d.Env[k] = v
		case "RUN":
			words := shellWords(t, arg)
			i := slices.Index(words, "go")
			if i < 0 || i+1 >= len(words) || words[i+1] != "build" {
				continue
			}
			for _, w := range words[:i] {
				if strings.Contains(w, "=") && !strings.HasPrefix(w, "--") {
					d.BuildEnv = append(d.BuildEnv, w)
				}
			}
			d.BuildArgs = words[i+2:]
		}
	}
	return d
}

// shellWords splits s as sh would for the simple words of a RUN line:
// blanks separate words, double and single quotes group them.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("Dockerfile: unterminated quote in %q", s)
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	d := parseDockerfile(t)
	if len(d.From) != 2 || !strings.HasPrefix(d.From[0], "golang:1.26") {
		t.Errorf("stages %q: want a golang:1.26 build stage and a final stage", d.From)
	}
	if final := d.From[len(d.From)-1]; final != "gcr.io/distroless/static-debian12:nonroot" && final != "scratch" {
		t.Errorf("final image %q: want distroless static (nonroot) or scratch", final)
	}
	if d.User == "" || d.User == "root" || strings.HasPrefix(d.User, "0") {
		t.Errorf("USER %q: want a non-root user", d.User)
	}
	if d.Entrypoint != `["/outbox"]` || d.Cmd != `["relay"]` {
		t.Errorf(`ENTRYPOINT %s CMD %s: want ["/outbox"] and ["relay"]`, d.Entrypoint, d.Cmd)
	}
	if !slices.Contains(d.BuildEnv, "CGO_ENABLED=0") {
		t.Errorf("go build env %q: want CGO_ENABLED=0", d.BuildEnv)
	}
	for _, want := range []string{"-trimpath", "-ldflags", "-s -w", "./cmd/outbox"} {
		// The ldflags word is "-s -w" followed by the version stamp.
		if !slices.ContainsFunc(d.BuildArgs, func(a string) bool { return a == want || want == "-s -w" && strings.HasPrefix(a, want+" ") }) {
			t.Errorf("go build %q: want %q", d.BuildArgs, want)
		}
	}
	// The image's environment holds settings the relay knows.
	known := commandEnv(t, "relay")
	for k := range d.Env {
		if strings.HasPrefix(k, "OUTBOX_") && !known[k] {
			t.Errorf("Dockerfile: ENV %s is not a setting of outbox relay", k)
		}
	}
}

// TestStaticBinary builds the command exactly as the Dockerfile does and
// checks the result needs no dynamic loader: it runs on distroless/static or
// scratch. It compiles the whole command: skipped with -short.
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the static build is not checked")
	}
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	d := parseDockerfile(t)
	bin := filepath.Join(t.TempDir(), "outbox")
	args := slices.Clone(d.BuildArgs)
	i := slices.Index(args, "-o")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("Dockerfile: go build %q has no -o", args)
	}
	args[i+1] = bin
	for j := range args {
		args[j] = strings.ReplaceAll(args[j], "${VERSION}", "v0.0.0-buildtest")
	}
	cmd := exec.Command(goBin, append([]string{"build"}, args...)...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), d.BuildEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %s: the binary is dynamically linked", p.Type)
		}
	}
	if f.Section(".interp") != nil || f.Section(".dynamic") != nil {
		t.Error("the binary has an .interp or .dynamic section: it is dynamically linked")
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("imported libraries %q (%v), want none", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags -s was not applied")
	}
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("static binary: %.1f MiB", float64(fi.Size())/(1<<20))
	}

	// It runs.
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "outbox v0.0.0-buildtest ") {
		t.Errorf("outbox version: %v: %s", err, out)
	}
}

// TestDockerignoreKeepsSources checks that .dockerignore excludes no file the
// image's go build reads: go.mod, go.sum, and every Go and embedded file of
// the module's packages the command imports.
func TestDockerignoreKeepsSources(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	patterns := dockerignore(t)
	if len(patterns) == 0 {
		t.Fatal(".dockerignore: no pattern")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json=Dir,Module,GoFiles,EmbedFiles,CgoFiles", "./cmd/outbox")
	cmd.Dir = moduleRoot
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v: %s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	root, err := filepath.Abs(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Dir                           string
			Module                        *struct{ Main bool }
			GoFiles, EmbedFiles, CgoFiles []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range slices.Concat(p.GoFiles, p.EmbedFiles, p.CgoFiles) {
			files = append(files, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	if len(files) < 10 {
		t.Fatalf("go list found only %q", files)
	}
	for _, f := range files {
		if p := ignoredBy(f, patterns); p != "" {
			t.Errorf(".dockerignore pattern %q excludes %s, which the image's go build needs", p, f)
		}
	}
	// And the matcher does match what it should.
	for _, f := range []string{".git/HEAD", "outbox.test", "cmd/outbox/outbox.test", "deploy/grafana/outbox.json"} {
		if ignoredBy(f, patterns) == "" {
			t.Errorf(".dockerignore does not exclude %s", f)
		}
	}
}

// dockerignore reads .dockerignore's patterns.
func dockerignore(t *testing.T) []string {
	t.Helper()
	var pats []string
	for _, l := range strings.Split(string(readFile(t, "../.dockerignore")), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			t.Fatalf(".dockerignore: exception %q: ignoredBy does not implement them", l)
		}
		pats = append(pats, strings.TrimPrefix(filepath.ToSlash(filepath.Clean(l)), "/"))
	}
	return pats
}

// ignoredBy returns the pattern that excludes path (slash-separated, relative
// to the build context), or "". As Docker does, a pattern that matches a
// directory excludes everything below it, and "**/" matches any number of
// directories.
func ignoredBy(path string, patterns []string) string {
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		for i := 1; i <= len(parts); i++ {
			prefix := strings.Join(parts[:i], "/")
			if matchDockerPattern(p, prefix) {
				return p
			}
		}
	}
	return ""
}

func matchDockerPattern(pattern, path string) bool {
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		parts := strings.Split(path, "/")
		for i := range parts {
			if matchDockerPattern(rest, strings.Join(parts[i:], "/")) {
				return true
			}
		}
		return false
	}
	ok, _ := filepath.Match(pattern, path)
	return ok
}
