package webhook_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/webhook"
)

// A relay whose webhook endpoint is a private address, without
// AllowPrivateNetworks: a configuration error every event would hit. The
// relay backs off as a whole: no request, no attempt counted, no dead
// letter, not ready, and the reason names the option that allows the
// address. Once allowed, the backlog is delivered.
func TestRelayPrivateEndpointIsAnOutage(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t) // on 127.0.0.1
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	events := make([]outbox.Event, 5)
	for i := range events {
		events[i] = outbox.Event{AggregateType: "order", AggregateID: "o-" + string(rune('1'+i)), EventType: "order.created", Payload: []byte(`{}`)}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := w.Write(ctx, tx, events...); return err }); err != nil {
		t.Fatal(err)
	}

	pub, err := webhook.New(webhook.Config{URL: rc.srv.URL + "/hooks/{event_type}", Secrets: []string{testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // MaxAttempts 1: a counted attempt would dead-letter at once
		res, err := relay.ProcessBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Unavailable != 5 || res.DeadLettered != 0 || res.Retried != 0 {
			t.Fatalf("batch = %+v, want the 5 events left untouched as unavailable", res)
		}
	}
	var touched int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE attempts > 0 OR dead_at IS NOT NULL OR last_error IS NOT NULL`).Scan(&touched); err != nil {
		t.Fatal(err)
	}
	if touched != 0 {
		t.Errorf("%d events burnt an attempt or were dead-lettered", touched)
	}
	if n := rc.hitCount(); n != 0 {
		t.Errorf("the private endpoint received %d requests", n)
	}
	if err := relay.Ready(ctx); err == nil {
		t.Error("Ready() = nil, want not ready")
	}
	if err := pub.Health(ctx); err == nil || !strings.Contains(err.Error(), "Config.AllowPrivateNetworks") || !strings.Contains(err.Error(), "outbox_allow_private_networks=true") {
		t.Errorf("Health() = %v, want the refusal, naming the option that allows private addresses", err)
	}
	// Running, the relay logs the outage with that reason.
	var logs syncLog
	running, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, MaxAttempts: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), OutageBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- running.Run(rctx) }()
	testkit.Eventually(testkit.WithDetail(t, func() string { return "logs:\n" + logs.String() }), 30*time.Second,
		"the first batch's outage logged", func() bool { return strings.Contains(logs.String(), "outbox_allow_private_networks=true") })
	stop()
	<-done
	if !strings.Contains(logs.String(), "broker unavailable, relay backing off; no attempt counted") {
		t.Errorf("relay log lacks the outage:\n%s", logs.String())
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE attempts > 0 OR dead_at IS NOT NULL`).Scan(&touched); err != nil || touched != 0 {
		t.Errorf("%d events burnt an attempt while the relay ran (%v)", touched, err)
	}

	allowed, err := webhook.New(webhook.Config{URL: rc.srv.URL + "/hooks/{event_type}", Secrets: []string{testSecret}, AllowPrivateNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer allowed.Close()
	relay, err = outbox.NewRelay(pool, allowed, outbox.RelayConfig{Schema: schema, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitUnlocked(t, pool, 5) // the stopped relay's cancelled session may hold them
	if res, err := relay.ProcessBatch(ctx); err != nil || res.Published != 5 {
		t.Errorf("batch once allowed = %+v, %v; want the 5 published", res, err)
	}
}

// syncLog is a log destination safe for the relay's goroutines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
