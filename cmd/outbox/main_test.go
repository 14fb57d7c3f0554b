package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// The real binary, sent a real SIGTERM, drains and exits 0: the signal
// wiring of main. Everything else is tested in-process in outboxcli.
func TestBinarySIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "outbox")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, bin, "relay", "--broker", "stdout:", "--schema", schema)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+testdb.URL())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		logs.WriteString(lines.Text() + "\n")
		if strings.Contains(lines.Text(), `"msg":"outbox relay started"`) {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		logs.WriteString(lines.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"outbox relay stopped"`) {
		t.Errorf("no drain logged:\n%s", logs.String())
	}
}
