package testdb

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// ClockLag is how far the clock of ClockBehind's server runs behind the
// machine's.
const ClockLag = time.Hour

// libfaketime is Debian's libfaketime (.ci/run installs it); the
// multi-threaded variant, as the server's background workers use timers.
const libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

// ClockBehind returns a private PostgreSQL (wal_level=logical) whose clock
// runs ClockLag behind the machine's, and so behind the relay's: now(),
// transaction and commit times all lag. For tests that a relay goes by
// the database's time, not its own. It starts on first use; Main stops it.
// Without libfaketime or the server binaries the test is skipped, or fails
// under CI=true.
func ClockBehind(t testing.TB) *Server {
	t.Helper()
	clock.mu.Lock()
	defer clock.mu.Unlock()
	if clock.url == "" && clock.err == nil {
		clock.url, clock.err = startClockBehind()
	}
	if errors.Is(clock.err, errNoBinaries) && os.Getenv("CI") != "true" {
		t.Skipf("testdb: %v", clock.err)
	}
	if clock.err != nil {
		t.Fatalf("testdb: server with a lagging clock: %v", clock.err)
	}
	return &Server{url: clock.url}
}

var clock struct {
	mu      sync.Mutex
	url     string
	err     error
	cluster *cluster
}

func startClockBehind() (string, error) {
	if _, err := os.Stat(libfaketime); err != nil {
		return "", fmt.Errorf("%w: %s (Debian package libfaketime) is needed to run a server with its own clock", errNoBinaries, libfaketime)
	}
	c, err := startCluster(clusterOptions{
		env:  []string{"LD_PRELOAD=" + libfaketime, fmt.Sprintf("FAKETIME=-%ds", int(ClockLag.Seconds()))},
		what: fmt.Sprintf("clock %v behind, wal_level=logical", ClockLag),
	})
	if err != nil {
		return "", err
	}
	clock.cluster = c
	return c.url(), nil
}

// StopClockBehind stops ClockBehind's server, if a test started one; Main
// calls it.
func StopClockBehind() {
	clock.mu.Lock()
	defer clock.mu.Unlock()
	if clock.cluster != nil {
		clock.cluster.stop()
		clock.cluster = nil
		clock.url, clock.err = "", errors.New("the server with a lagging clock was stopped (testdb.Main returned)")
	}
}
