// Package testnats connects tests to the local NATS JetStream server
// (NATS_URL, default nats://127.0.0.1:4222) and gives each test a stream of
// its own.
package testnats

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// URL returns the NATS server's URL, once an anchor stream is there.
func URL() string {
	u := "nats://127.0.0.1:4222"
	if e := os.Getenv("NATS_URL"); e != "" {
		u = e
	}
	anchorOnce.Do(func() { anchor(u) })
	return u
}

var anchorOnce sync.Once

// anchor makes sure a file-storage stream that no test deletes exists.
// nats-server (2.9) removes its account's stream directory when the last
// file stream is deleted, and a stream created at that moment fails with
// "error creating store for stream" (10049): parallel test processes that
// create and delete streams hit it. With one stream always there, the
// directory stays. Best effort: a server that is down fails the tests
// anyway.
func anchor(url string) {
	nc, err := natsgo.Connect(url, natsgo.Timeout(5*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PGOUTBOX_TEST_ANCHOR",
		Subjects: []string{"pgoutbox-test-anchor"}, Storage: jetstream.FileStorage, MaxMsgs: 1})
}

// Conn connects to NATS and closes the connection when the test ends.
func Conn(t testing.TB, opts ...natsgo.Option) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(URL(), opts...)
	if err != nil {
		t.Fatalf("testnats: connect to %s: %v", URL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Stream creates a stream capturing "<prefix>.>" for a fresh prefix, deleted
// when the test ends. It returns the stream and the prefix.
func Stream(t testing.TB, nc *natsgo.Conn) (jetstream.Stream, string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.ToUpper(testdb.NewSchemaName("T"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: prefix, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("testnats: create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, prefix)
	})
	return s, prefix
}

// Binary is the nats-server executable the tests start servers of their own
// with (NATS_SERVER_BIN, default /usr/sbin/nats-server, the Debian package's).
func Binary() string {
	if b := os.Getenv("NATS_SERVER_BIN"); b != "" {
		return b
	}
	return "/usr/sbin/nats-server"
}

// Server starts a nats-server of the test's own with the configuration conf
// (nats-server's config syntax; "listen" and "jetstream" are added) and
// returns its client port. The server is stopped when the test ends. Without
// the binary the test is skipped, or fails when CI=true: CI must run it.
func Server(t testing.TB, conf string) int {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testnats: nats-server binary %s: %v (CI=true: install the nats-server package)", bin, err)
		}
		t.Skipf("testnats: nats-server binary %s not available: %v", bin, err)
	}
	dir := t.TempDir()
	port := freePort(t)
	full := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream { store_dir: %q }\n%s\n", port, filepath.Join(dir, "js"), conf)
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-c", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("testnats: start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return port
		}
		if time.Now().After(deadline) {
			t.Fatalf("testnats: nats-server did not listen on port %d within 10s: %v\n%s", port, err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // poll until it listens
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
