package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
)

// readmeMarker precedes, in README.md, the code block that must be this
// program verbatim: README shows it whole so that it compiles as written.
const readmeMarker = "<!-- examples/quickstart/main.go -->"

// TestREADME fails when README's library example and main.go differ.
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	block, err := codeBlockAfter(string(readme), readmeMarker)
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if block != string(prog) {
		t.Fatalf("README.md's example differs from examples/quickstart/main.go (copy one onto the other): %s", firstDiff(block, string(prog)))
	}
}

// codeBlockAfter returns the body of the first ```go fence after marker.
func codeBlockAfter(doc, marker string) (string, error) {
	_, rest, ok := strings.Cut(doc, marker)
	if !ok {
		return "", fmt.Errorf("no %q marker", marker)
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	if !ok {
		return "", errors.New("no ```go block after the marker")
	}
	body, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		return "", errors.New("the ```go block after the marker is not closed")
	}
	return body + "\n", nil
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: README %q, main.go %q", i+1, x, y)
		}
	}
	return "trailing newline"
}

func TestCodeBlockAfter(t *testing.T) {
	t.Parallel()
	doc := "intro\n" + readmeMarker + "\n\n```go\npackage main\n```\n\n```go\nother\n```\n"
	got, err := codeBlockAfter(doc, readmeMarker)
	if err != nil || got != "package main\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := codeBlockAfter("```go\nx\n```\n", readmeMarker); err == nil {
		t.Fatal("a README without the marker must fail")
	}
	if _, err := codeBlockAfter(readmeMarker+"\n```go\nunclosed\n", readmeMarker); err == nil {
		t.Fatal("an unclosed block must fail")
	}
}

// TestCreateOrder runs the example's business code against the real
// PostgreSQL: the order and its event commit together, and a failed order
// insert (the same id twice) is reported and writes no event.
func TestCreateOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total numeric)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	defer db.Close()

	id, err := createOrder(ctx, db, "o-1", 12.5)
	if err != nil {
		t.Fatalf("first order: %v", err)
	}
	if _, err := uuid.Parse(id); err != nil {
		t.Fatalf("createOrder returned event id %q: %v", id, err)
	}
	_, err = createOrder(ctx, db, "o-1", 12.5)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(err.Error(), "insert order") {
		t.Fatalf("the same order twice: want the insert's unique violation, got %v", err)
	}
	var n int
	var payload []byte
	if err := pool.QueryRow(ctx, `SELECT count(*), min(payload::text)::bytea FROM outbox_events WHERE aggregate_id = 'o-1' AND event_type = 'order.created'`).Scan(&n, &payload); err != nil {
		t.Fatal(err)
	}
	if n != 1 || !bytes.Contains(payload, []byte(`"order_id": "o-1"`)) {
		t.Fatalf("outbox rows for o-1 = %d (payload %s), want 1 with its order id", n, payload)
	}
}

// TestRun runs the whole program against a schema and a NATS server of the
// test's own: it prints the commit, then the event as the subscriber got it.
func TestRun(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	port := testnats.Server(t, "")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, &out, u.String(), fmt.Sprintf("nats://127.0.0.1:%d", port)); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := regexp.MustCompile(`^committed (order-\d+) and its event ([0-9a-f-]{36}) in one transaction\n` +
		`received ([0-9a-f-]{36}) on quickstart\.order\.created: \{.*"order_id": "(order-\d+)".*\}\n$`)
	m := want.FindStringSubmatch(out.String())
	if m == nil || m[2] != m[3] || m[1] != m[4] {
		t.Fatalf("output:\n%s\nwant the commit of one order and the receipt of its event", out.String())
	}
}
