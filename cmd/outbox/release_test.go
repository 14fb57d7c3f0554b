package main

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/macho"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReleaseRecipe runs the Makefile's release target, as a release would,
// into a temporary directory and checks what it built: one static binary per
// platform, for the right OS and architecture, listed in SHA256SUMS, reporting
// the stamped version. It cross-compiles the command four times: skipped with
// -short.
func TestReleaseRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: cross-compiles the command for four platforms")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make not in PATH: the release recipe cannot be checked")
		}
		t.Skip("make not in PATH")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const version = "v0.0.0-releasetest"
	dist := t.TempDir()
	start := time.Now()
	cmd := exec.CommandContext(ctx, makeBin, "-C", "../..", "release", "VERSION="+version, "DIST="+dist)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release: %s", time.Since(start).Round(time.Second))

	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	type target struct{ goos, goarch string }
	for _, p := range []target{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}} {
		name := "outbox-" + version + "-" + p.goos + "-" + p.goarch
		bin := filepath.Join(dist, name)
		if !bytes.Contains(sums, []byte("  "+name+"\n")) {
			t.Errorf("SHA256SUMS does not list %s:\n%s", name, sums)
		}
		switch p.goos {
		case "linux":
			checkELF(t, bin, p.goarch)
		case "darwin":
			checkMachO(t, bin, p.goarch)
		}
		if p.goos == runtime.GOOS && p.goarch == runtime.GOARCH {
			out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "outbox "+version+" (") {
				t.Errorf("%s --version: %v: %q, want it to report %s", name, err, out, version)
			}
		}
	}
}

func checkELF(t *testing.T, path, goarch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
	if f.Machine != want {
		t.Errorf("%s: machine %s, want %s", path, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: program header %s: dynamically linked, want static", path, p.Type)
		}
	}
}

func checkMachO(t *testing.T, path, goarch string) {
	t.Helper()
	f, err := macho.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
	if f.Cpu != want {
		t.Errorf("%s: cpu %s, want %s", path, f.Cpu, want)
	}
}
