package orders

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
)

// stoppableBroker takes NATS away by cutting the proxy in front of it: the
// clients see their connections reset and new ones refused, as when the
// server is down.
type stoppableBroker struct{ p *tcpproxy.Proxy }

func (b stoppableBroker) Stop()        { b.p.Cut() }
func (b stoppableBroker) Start() error { b.p.Restore(); return nil }

// The whole story at a small size, on the real PostgreSQL and NATS: rolled
// back orders, a broker outage, a relay restart and every event delivered
// twice; every committed order ships once and the schema is dropped.
func TestStory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	u, err := url.Parse(testnats.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	schema := testdb.NewSchemaName("orders")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	var out bytes.Buffer
	var progress atomic.Int64
	rep, err := Run(ctx, Config{
		DatabaseURL: testdb.URL(), Schema: schema, NATSURL: "nats://" + proxy.Addr(),
		Broker: stoppableBroker{proxy}, Outage: 500 * time.Millisecond, RelayDown: 200 * time.Millisecond,
		Redeliver: true, Orders: 60, Rate: 200, RollbackEvery: 10,
		Progress: func(Progress) { progress.Add(1) },
	}, &out)
	rep.WriteSummary(&out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Committed != 54 || rep.RolledBack != 6 {
		t.Errorf("%d orders committed, %d rolled back; want 54 and 6", rep.Committed, rep.RolledBack)
	}
	if rep.Shipments != 54 || rep.ShippedOnce != 54 || rep.Lost != 0 || rep.Unexpected != 0 {
		t.Errorf("%d shipments, %d shipped once, %d lost, %d unexpected; want one shipment per committed order",
			rep.Shipments, rep.ShippedOnce, rep.Lost, rep.Unexpected)
	}
	if rep.Duplicates < 54 {
		t.Errorf("duplicates skipped = %d, want every one of the 54 events delivered again", rep.Duplicates)
	}
	if rep.MaxPending == 0 || progress.Load() == 0 {
		t.Errorf("max pending %d, %d progress calls: the outage left no backlog or nothing was reported", rep.MaxPending, progress.Load())
	}
	for _, want := range []string{">>> failure: stopping the NATS server", ">>> relay restarted", ">>> failure: 54 events marked unpublished",
		"result: lost 0, shipped twice 0, duplicates skipped", ": OK, every committed order shipped exactly once"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	var exists bool
	if err := testdb.Pool(t, "").QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		t.Fatal(err)
	} else if exists {
		t.Errorf("schema %s left behind", schema)
	}
}

// A run that loses events says so: the shipping service's consumer never
// sees the events the relay publishes elsewhere, and Run ends with
// ErrNotDelivered after its timeout.
func TestStoryReportsLoss(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	schema := testdb.NewSchemaName("orders")
	t.Cleanup(func() { testdb.Drop(t, schema) })
	var out bytes.Buffer
	rep, err := Run(ctx, Config{
		DatabaseURL: testdb.URL(), Schema: schema, NATSURL: testnats.URL(), Orders: 5,
		Timeout: time.Second, breakShipping: true,
	}, &out)
	if !errors.Is(err, ErrNotDelivered) {
		t.Fatalf("Run = %v, want ErrNotDelivered; output:\n%s", err, out.String())
	}
	if rep.Lost != 5 || rep.OK() {
		t.Errorf("report %+v: want 5 lost and not OK", rep)
	}
}

// The endpoint rejects what it cannot turn into an order, before touching the
// database.
func TestCreateOrderRejectsBadRequests(t *testing.T) {
	t.Parallel()
	s := &OrderService{}
	for _, tc := range []struct {
		method, body string
		want         int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodPost, `{`, http.StatusBadRequest},
		{http.MethodPost, `{"customer_id":"c","total":0}`, http.StatusBadRequest},
		{http.MethodPost, `{"total":3}`, http.StatusBadRequest},
		{http.MethodPost, `{"customer_id":"c","total":3,"admin":true}`, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(tc.method, "/orders", strings.NewReader(tc.body)))
		if rec.Code != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.body, rec.Code, tc.want)
		}
	}
}
