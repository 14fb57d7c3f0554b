package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// The whole demo in-process at a small size: real PostgreSQL, an embedded
// NATS server, every event delivered twice.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, Options{DatabaseURL: testdb.URL(), Orders: 8}, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if rep.Shipments != rep.Orders || rep.ShippedOnce != rep.Orders {
		t.Errorf("%d orders, %d shipments, %d shipped once; want one shipment per order", rep.Orders, rep.Shipments, rep.ShippedOnce)
	}
	if rep.Duplicates < int64(rep.Orders) {
		t.Errorf("duplicates delivered = %d, want every one of the %d events delivered again", rep.Duplicates, rep.Orders)
	}
	if rep.Processed != int64(rep.Orders) {
		t.Errorf("handler ran %d times for %d orders", rep.Processed, rep.Orders)
	}
	if !strings.Contains(out.String(), "OK: every event was delivered twice") {
		t.Error("the demo did not print its verdict")
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
