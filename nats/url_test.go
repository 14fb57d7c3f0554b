package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testcerts"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
	"github.com/pgoutbox/outbox/publishertest"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("tls://outbox:s3cret@n1:4222,n2:4222?subject=orders.{event_type}&max_pending=10" +
		"&ensure_stream=ORDERS&stream_subjects=orders.>,audit.>&creds=/c.creds&ca=/ca.pem&cert=/c.pem&key=/k.pem&name=relay-1")
	dc, cfg, err := outboxnats.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if dc.URL != "tls://outbox:s3cret@n1:4222,n2:4222" || dc.CredsFile != "/c.creds" || dc.CAFile != "/ca.pem" ||
		dc.CertFile != "/c.pem" || dc.KeyFile != "/k.pem" || dc.Name != "relay-1" {
		t.Errorf("DialConfig = %+v", dc)
	}
	if cfg.Subject != "orders.{event_type}" || cfg.MaxPending != 10 || cfg.EnsureStream != "ORDERS" ||
		fmt.Sprint(cfg.StreamSubjects) != "[orders.> audit.>]" {
		t.Errorf("Config = %+v", cfg)
	}
	for raw, want := range map[string]string{
		"nats://h:4222?subjet=x":                          `option subjet="x": unknown option`,
		"nats://u:canary@h:4222?max_pending=0":            "max_pending",
		"redis://h:6379":                                  `scheme "redis"`,
		"nats://h:4222?nkey=/a&nkey=/b":                   "given more than once",
		"nats://u:canary@h:4222?creds=/nonexistent.creds": "CredsFile",
		"nats://h:4222?cert=/c.pem":                       "CertFile and KeyFile go together",
		"nats://h:4222?ensure_stream=A.B&subject=x.y":     "EnsureStream",
		"nats://h:4222?ensure_stream=A":                   "StreamSubjects: required",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = outboxnats.NewFromURL(u)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewFromURL(%s): %v, want an error containing %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "canary") {
			t.Errorf("NewFromURL(%s): the error shows the password: %v", raw, err)
		}
	}
}

// With ensure_stream the publisher creates its stream before publishing, and
// again when it has been deleted since.
func TestEnsureStream(t *testing.T) {
	t.Parallel()
	nc := testnats.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, prefix := testnats.Stream(t, nc) // only for a fresh prefix; the stream itself is not used
	name := prefix + "_ENSURED"
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	subject := "ensured" + prefix
	u, _ := url.Parse(testnats.URL() + "?subject=" + subject + ".{event_type}&ensure_stream=" + name)
	pub, err := outboxnats.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx := context.Background()
	publish := func() {
		t.Helper()
		var err error
		// The connection is still being made.
		testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Publish: %v", err) }), 10*time.Second,
			"a publish with ensure_stream", func() bool {
				err = pub.Publish(ctx, publishertest.NewMessage("1", `{}`))
				return err == nil
			})
	}
	publish()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("the stream was not created: %v", err)
	}
	if got := s.CachedInfo().Config.Subjects; fmt.Sprint(got) != "["+subject+".>]" {
		t.Errorf("stream subjects %v, want [%s.>]", got, subject)
	}
	if err := js.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	// The first publish after the deletion finds no stream (an outage naming
	// the subject); the next one creates it again.
	err = pub.Publish(ctx, publishertest.NewMessage("2", `{}`))
	var noStream outboxnats.NoStreamError
	if !errors.As(err, &noStream) || outbox.Classify(err) != outbox.ClassUnavailable {
		t.Fatalf("publish after the stream was deleted: %v, want an unavailable NoStreamError", err)
	}
	publish()
	if _, err := js.Stream(ctx, name); err != nil {
		t.Fatalf("the stream was not created again: %v", err)
	}
}

// A server requiring TLS with client certificates and nkey authentication:
// the URL's ca, cert, key and nkey options connect to it; without the nkey,
// publishing fails as unavailable (every message alike), never permanent.
func TestTLSClientCertAndNKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testcerts.Write(t, dir)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pubKey, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	port := testnats.Server(t, fmt.Sprintf(`
tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
}
authorization { users = [ { nkey: %q } ] }
`, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem"), pubKey))

	base := fmt.Sprintf("tls://127.0.0.1:%d?subject=secure.{event_type}&ensure_stream=SECURE&ca=%s&cert=%s&key=%s",
		port, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	u, _ := url.Parse(base + "&nkey=" + seedFile)
	pub, err := outboxnats.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var perr error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Publish: %v", perr) }), 15*time.Second,
		"a publish over TLS with a client certificate and an nkey", func() bool {
			perr = pub.Publish(context.Background(), publishertest.NewMessage("1", `{}`))
			return perr == nil
		})

	u, _ = url.Parse(base)
	anon, err := outboxnats.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	err = anon.Publish(context.Background(), publishertest.NewMessage("2", `{}`))
	if err == nil || outbox.Classify(err) != outbox.ClassUnavailable {
		t.Fatalf("publish without the nkey: %v (%s), want unavailable", err, outbox.Classify(err))
	}
}
