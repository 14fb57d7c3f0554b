package outbox_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proxiedPool is a pool on the test's schema whose connections go through
// a proxy the test controls.
func proxiedPool(t *testing.T, schema string) (*pgxpool.Pool, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if !strings.Contains(host, ":") {
		host += ":5432"
	}
	proxy := tcpproxy.Start(t, host)
	u.Host = proxy.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 6
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, proxy
}

// TestDeadConnectionIsDiscarded: the relay's database connections freeze
// (the peer never answers again, new connections still get through). Each
// statement on a frozen connection misses its deadline, is logged with its
// phase, and the connection is discarded: events written after the freeze
// are all delivered over fresh connections within seconds, the listener
// notices its own frozen connection, and Run returns within seconds of its
// context's cancel.
func TestDeadConnectionIsDiscarded(t *testing.T) {
	e := setup(t)
	pool, proxy := proxiedPool(t, e.schema)
	pub := memory.New()
	logs := &lockedBuffer{}
	const stmt = 2 * time.Second
	cfg := outbox.RelayConfig{Schema: e.schema, Workers: 2, PollInterval: 20 * time.Millisecond,
		PublishTimeout: time.Second, StatementTimeout: stmt, StatsInterval: 500 * time.Millisecond,
		OutageBackoff: outbox.Backoff{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		Listen:        true, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	r, err := outbox.NewRelay(pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	e.write(20)
	if err := pub.WaitDistinct(ctx(t), 20); err != nil {
		t.Fatal(err)
	}
	if n := proxy.Stats().OpenConnections; n < 2 {
		t.Fatalf("%d connections open through the proxy before the freeze; want the relay's", n)
	}
	thaw := proxy.Freeze()
	defer thaw()
	frozenAt := time.Now()
	e.write(200)
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	if err := pub.WaitDistinct(wctx, 220); err != nil {
		t.Fatalf("after the freeze, %d of 200 events delivered within 15s: %v\nlogs:\n%s", pub.Distinct()-20, err, tailLines(logs.String(), 20))
	}
	t.Logf("200 events written after the freeze delivered %s after it", time.Since(frozenAt).Round(time.Millisecond))
	if !strings.Contains(logs.String(), "timed out") {
		t.Errorf("no statement reported timing out on a frozen connection; logs:\n%s", tailLines(logs.String(), 20))
	}

	// The listener's connection is frozen too: its liveness ping finds it.
	testkit.Eventually(testkit.WithDetail(t, func() string { return "logs:\n" + tailLines(logs.String(), 20) }), 3*stmt+3*time.Second,
		"the listener noticing its frozen connection", func() bool { return strings.Contains(logs.String(), "outbox listener lost") })

	// Freeze again, with a batch likely in flight, and stop the relay.
	thaw2 := proxy.Freeze()
	defer thaw2()
	e.write(10)
	time.Sleep(100 * time.Millisecond)
	cancel()
	stopAt := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		t.Logf("Run returned %s after cancel", time.Since(stopAt).Round(time.Millisecond))
	case <-time.After(2*stmt + 3*time.Second):
		t.Errorf("Run did not return within %s of cancel with frozen connections", 2*stmt+3*time.Second)
		thaw()
		thaw2()
		<-done
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
