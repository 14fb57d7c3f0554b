package outboxcli

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
)

// A relay whose broker refuses its credentials says so at start, before any
// event arrives.
func TestRelayLogsUnreachableBrokerAtStart(t *testing.T) {
	f := setup(t)
	vars := dbEnv()
	vars["OUTBOX_SCHEMA"] = f.schema
	r := startRelay(t, &bytes.Buffer{}, vars, "--broker", "amqp://wrong-user:wrong-password@127.0.0.1:5672/")
	m := r.stderr.waitFor(t, `"msg":"broker unreachable[^\n]*"err":"([^"\n]*)"`)
	if !strings.Contains(m[1], "403") || strings.Contains(r.stderr.String(), "wrong-password") {
		t.Errorf("the warning's error %q: want RabbitMQ's refusal (403), and never the password; stderr:\n%s", m[1], r.stderr.String())
	}
}

// fakeHealth fails its first fails checks.
type fakeHealth struct {
	outbox.Publisher
	mu     sync.Mutex
	fails  int
	checks int
}

func (f *fakeHealth) Health(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks++
	if f.checks <= f.fails {
		return errors.New("connection refused")
	}
	return nil
}

// watchBroker logs once when the broker is unreachable and once when it
// answers again, not at every check; a broker that answers at start is not
// logged.
func TestWatchBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fails      int
		warn, info int
	}{{0, 0, 0}, {3, 1, 1}} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		hc := &fakeHealth{fails: tc.fails}
		watchBroker(context.Background(), log, hc, time.Millisecond)
		out := buf.String()
		if w, i := strings.Count(out, "level=WARN"), strings.Count(out, "level=INFO"); w != tc.warn || i != tc.info || hc.checks != tc.fails+1 {
			t.Errorf("%d failed checks: %d warnings, %d infos, %d checks; want %d, %d, %d:\n%s", tc.fails, w, i, hc.checks, tc.warn, tc.info, tc.fails+1, out)
		}
	}
	// Stopped with the relay, however long the outage.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchBroker(ctx, slog.New(slog.DiscardHandler), &fakeHealth{fails: 1 << 30}, time.Hour)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("watchBroker outlived its context")
	}
}
