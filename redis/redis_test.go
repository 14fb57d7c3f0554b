package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testcerts"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/publishertest"
	outboxredis "github.com/pgoutbox/outbox/redis"
)

const testMaxValueSize = 256 << 10

// quiet drops go-redis's own log lines ("failed to dial ..."): these tests
// refuse connections on purpose, and assert on the errors instead.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	goredis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// serverURL is the test server, REDIS_URL or the local default.
func serverURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// client connects to addr ("" for the server itself), with no retries of
// its own, closed when the test ends.
func client(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	if addr != "" {
		opts.Addr = addr
	}
	opts.MaxRetries = -1
	opts.DialTimeout = 2 * time.Second
	c := goredis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// prefix returns a fresh key prefix; every key under it is deleted when the
// test ends.
func prefix(t *testing.T, admin *goredis.Client) string {
	t.Helper()
	if err := admin.Ping(ctxFor(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("Redis at %s is not answering: %v", serverURL(), err)
	}
	p := testdb.NewSchemaName("pgoutbox:test")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, err := admin.Keys(ctx, p+":*").Result()
		if err == nil && len(keys) > 0 {
			err = admin.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("delete test streams: %v", err)
		}
	})
	return p
}

func newPublisher(t *testing.T, c goredis.UniversalClient, cfg outboxredis.Config) *outboxredis.Publisher {
	t.Helper()
	p, err := outboxredis.New(c, cfg)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	return p
}

// readStream returns the stream's entries, waiting until it holds at least n.
func readStream(ctx context.Context, c *goredis.Client, stream string, n int) ([]goredis.XMessage, error) {
	for {
		ms, err := c.XRange(ctx, stream, "-", "+").Result()
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		if len(ms) >= n || ctx.Err() != nil {
			return ms, ctx.Err()
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond): // poll interval
		}
	}
}

func received(stream string, ms []goredis.XMessage) []publishertest.Received {
	out := make([]publishertest.Received, len(ms))
	for i, m := range ms {
		h := map[string]string{}
		for k, v := range m.Values {
			if name, ok := strings.CutPrefix(k, outboxredis.HeaderPrefix); ok {
				h[name] = fmt.Sprint(v)
			} else if strings.HasPrefix(k, outboxredis.FieldCloudEventsPrefix) || k == outboxredis.FieldContentType {
				h[k] = fmt.Sprint(v)
			}
		}
		payload, _ := m.Values[outboxredis.FieldPayload].(string)
		out[i] = publishertest.Received{Topic: stream, Headers: h, Payload: []byte(payload)}
	}
	return out
}

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		admin := client(t, "")
		p := prefix(t, admin)
		u, err := url.Parse(serverURL())
		if err != nil {
			t.Fatal(err)
		}
		proxy := tcpproxy.Start(t, u.Host)
		c := client(t, proxy.Addr())
		pub := newPublisher(t, c, outboxredis.Config{Stream: p + ":{event_type}", MaxValueSize: testMaxValueSize})
		unroutable := newPublisher(t, c, outboxredis.Config{Stream: p + ":nostream:{event_type}", RequireStream: true})
		stream := p + ":order.created" // every message in the suite is an order.created
		return &publishertest.Broker{
			Publisher:      pub,
			TopicOf:        func(m *outbox.Message) string { return p + ":" + m.EventType },
			MaxPayload:     testMaxValueSize + 1,
			Unroutable:     unroutable,
			UnroutableName: p + ":nostream:order.created",
			RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
				own := ownServer(t)
				if err := own.ConfigSet(ctxFor(t, 5*time.Second), "maxmemory", "1").Err(); err != nil {
					t.Fatal(err)
				}
				return newPublisher(t, own, outboxredis.Config{Stream: "{event_type}"}), func() {
					if err := own.ConfigSet(ctxFor(t, 5*time.Second), "maxmemory", "0").Err(); err != nil {
						t.Errorf("lift maxmemory: %v", err)
					}
				}
			},
			Read: func(ctx context.Context, n int) ([]publishertest.Received, error) {
				ms, err := readStream(ctx, admin, stream, n)
				return received(stream, ms), err
			},
			Disconnect: func(*testing.T) func() {
				proxy.Cut()
				return proxy.Restore
			},
			CloudEvents: &publishertest.CloudEvents{Prefix: outboxredis.FieldCloudEventsPrefix, PercentEncoded: true, ContentType: outboxredis.FieldContentType},
		}
	})
}

func TestEntryFields(t *testing.T) {
	t.Parallel()
	c := client(t, "")
	p := prefix(t, c)
	pub := newPublisher(t, c, outboxredis.Config{Stream: p + ":{aggregate_type}.{aggregate_id}"})
	m := publishertest.NewMessage("42", `{"id":42}`)
	if err := pub.Publish(ctxFor(t, 10*time.Second), m); err != nil {
		t.Fatal(err)
	}
	stream := p + ":order.42"
	if got := pub.Stream(m); got != stream {
		t.Errorf("Stream = %q, want %q", got, stream)
	}
	ms, err := readStream(ctxFor(t, 10*time.Second), c, stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"id": m.ID.String(), "event_type": "order.created", "aggregate_type": "order", "aggregate_id": "42",
		"created_at": m.CreatedAt.UTC().Format(time.RFC3339Nano), "payload": `{"id":42}`,
	}
	for k, v := range m.StandardHeaders() {
		want["h:"+k] = v
	}
	got := ms[0].Values
	if len(got) != len(want) {
		t.Errorf("entry has %d fields, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("field %s = %#v, want %q", k, got[k], v)
		}
	}
	created, err := time.Parse(time.RFC3339Nano, got["created_at"].(string))
	if err != nil || !created.Equal(m.CreatedAt) {
		t.Errorf("created_at %v parses to %v (%v), want %v", got["created_at"], created, err, m.CreatedAt)
	}
}

func TestMaxLenTrimsApproximately(t *testing.T) {
	t.Parallel()
	c := client(t, "")
	p := prefix(t, c)
	const maxLen, total = 10, 600
	trimmed := newPublisher(t, c, outboxredis.Config{Stream: p + ":trimmed", MaxLen: maxLen})
	untrimmed := newPublisher(t, c, outboxredis.Config{Stream: p + ":untrimmed"})
	var last *outbox.Message
	for b := 0; b < total/50; b++ {
		batch := make([]*outbox.Message, 50)
		for i := range batch {
			batch[i] = publishertest.NewMessage(strconv.Itoa(b*50+i), `{}`)
		}
		last = batch[len(batch)-1]
		for _, pub := range []*outboxredis.Publisher{trimmed, untrimmed} {
			for i, err := range pub.PublishBatch(ctxFor(t, 10*time.Second), batch) {
				if err != nil {
					t.Fatalf("batch %d message %d: %v", b, i, err)
				}
			}
		}
	}
	ctx := ctxFor(t, 10*time.Second)
	nodeMax, err := c.ConfigGet(ctx, "stream-node-max-entries").Result()
	if err != nil {
		t.Fatal(err)
	}
	slack, _ := strconv.ParseInt(nodeMax["stream-node-max-entries"], 10, 64)
	if n := c.XLen(ctx, p+":untrimmed").Val(); n != total {
		t.Fatalf("untrimmed stream holds %d entries, want %d", n, total)
	}
	n := c.XLen(ctx, p+":trimmed").Val()
	if n < maxLen || n > maxLen+slack {
		t.Errorf("stream trimmed with MaxLen %d holds %d entries, want %d to %d (MAXLEN ~ trims whole nodes of %d)", maxLen, n, maxLen, maxLen+slack, slack)
	}
	newest, err := c.XRevRangeN(ctx, p+":trimmed", "+", "-", 1).Result()
	if err != nil || len(newest) != 1 || newest[0].Values["id"] != last.ID.String() {
		t.Errorf("newest entry = %v (%v), want the last event %s: trimming must drop the oldest", newest, err, last.ID)
	}
}

// Each message of a pipelined batch gets its own result: a key of the wrong
// type fails that message, permanently, and no other.
func TestWrongTypeIsPermanentAndAlone(t *testing.T) {
	t.Parallel()
	c := client(t, "")
	p := prefix(t, c)
	if err := c.Set(ctxFor(t, 5*time.Second), p+":not-a-stream", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, c, outboxredis.Config{Stream: p + ":{aggregate_id}"})
	batch := []*outbox.Message{
		publishertest.NewMessage("ok-1", `{}`), publishertest.NewMessage("not-a-stream", `{}`), publishertest.NewMessage("ok-2", `{}`),
	}
	errs := pub.PublishBatch(ctxFor(t, 10*time.Second), batch)
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("messages to real streams: %v, %v", errs[0], errs[2])
	}
	if outbox.Classify(errs[1]) != outbox.ClassPermanent || !strings.Contains(fmt.Sprint(errs[1]), "WRONGTYPE") {
		t.Errorf("message to a string key: %v (%s), want a permanent WRONGTYPE", errs[1], outbox.Classify(errs[1]))
	}
}

func TestRequireStream(t *testing.T) {
	t.Parallel()
	c := client(t, "")
	p := prefix(t, c)
	pub := newPublisher(t, c, outboxredis.Config{Stream: p + ":required", RequireStream: true})
	err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`))
	if !errors.Is(err, outboxredis.ErrNoStream) || outbox.Classify(err) != outbox.ClassUnavailable ||
		!strings.Contains(err.Error(), "XGROUP CREATE "+p+":required") {
		t.Fatalf("publish to a missing stream: %v (%s), want an unavailable ErrNoStream naming the command", err, outbox.Classify(err))
	}
	if n := c.Exists(ctxFor(t, 5*time.Second), p+":required").Val(); n != 0 {
		t.Fatal("RequireStream created the stream")
	}
	if err := c.XGroupCreateMkStream(ctxFor(t, 5*time.Second), p+":required", "consumers", "$").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`)); err != nil {
		t.Fatalf("publish once the stream exists: %v", err)
	}
}

// The local server has no replicas, so WAIT 1 can never be satisfied: the
// entry is added but must not count as published.
func TestWaitReplicasUnmet(t *testing.T) {
	t.Parallel()
	c := client(t, "")
	p := prefix(t, c)
	ctx := ctxFor(t, 10*time.Second)
	if info := c.Info(ctx, "replication").Val(); !strings.Contains(info, "connected_slaves:0") {
		t.Skip("the test server has replicas")
	}
	pub := newPublisher(t, c, outboxredis.Config{Stream: p + ":waited", WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	errs := pub.PublishBatch(ctx, []*outbox.Message{publishertest.NewMessage("1", `{}`), publishertest.NewMessage("2", `{}`)})
	for i, err := range errs {
		if !errors.Is(err, outboxredis.ErrNotReplicated) || outbox.Classify(err) != outbox.ClassTransient {
			t.Errorf("message %d: %v (%s), want a transient ErrNotReplicated", i, err, outbox.Classify(err))
		}
	}
	if n := c.XLen(ctx, p+":waited").Val(); n != 2 {
		t.Errorf("stream holds %d entries, want 2 (added, just not replicated)", n)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	pub := newPublisher(t, client(t, proxy.Addr()), outboxredis.Config{})
	if err := pub.Health(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("Health with Redis up: %v", err)
	}
	proxy.Cut()
	if err := pub.Health(ctxFor(t, 5*time.Second)); outbox.Classify(err) != outbox.ClassUnavailable {
		t.Errorf("Health with Redis cut off: %v, want an unavailable error", err)
	}
	proxy.Restore()
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Health: %v", err) }), 10*time.Second,
		"Health after restore", func() bool { err = pub.Health(ctxFor(t, 5*time.Second)); return err == nil })
}

func TestNewFromURL(t *testing.T) {
	t.Parallel()
	admin := client(t, "")
	p := prefix(t, admin)
	u, err := url.Parse(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("stream", p+":{aggregate_type}")
	q.Set("maxlen", "1000")
	q.Set("client_name", "pgoutbox-test")
	u.RawQuery = q.Encode()
	pub, err := outboxredis.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`)); err != nil {
		t.Fatal(err)
	}
	if n := admin.XLen(ctxFor(t, 5*time.Second), p+":order").Val(); n != 1 {
		t.Errorf("stream %s:order holds %d entries, want 1", p, n)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err = pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`))
	if !errors.Is(err, goredis.ErrClosed) || outbox.Classify(err) != outbox.ClassUnavailable {
		t.Errorf("publish after Close: %v, want the closed client's error, unavailable", err)
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("redis://u:pw@cache:6380/2?stream=ev.{event_type}&maxlen=500&max_value_size=1024&require_stream=true&wait_replicas=1&wait_timeout=250ms&pool_size=3")
	opts, cfg, err := outboxredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	want := outboxredis.Config{Stream: "ev.{event_type}", MaxLen: 500, MaxValueSize: 1024, RequireStream: true, WaitReplicas: 1, WaitTimeout: 250 * time.Millisecond}
	if cfg != want {
		t.Errorf("Config = %+v, want %+v", cfg, want)
	}
	if opts.Addr != "cache:6380" || opts.DB != 2 || opts.Username != "u" || opts.Password != "pw" || opts.PoolSize != 3 || opts.MaxRetries != -1 {
		t.Errorf("options = addr %s db %d user %s pool %d retries %d", opts.Addr, opts.DB, opts.Username, opts.PoolSize, opts.MaxRetries)
	}
	u, _ = url.Parse("redis://127.0.0.1/?max_retries=2")
	if opts, _, err := outboxredis.ParseURL(u); err != nil || opts.MaxRetries != 2 {
		t.Errorf("max_retries=2: %v, %v", opts, err)
	}

	const secret = "s3cr3t-pw"
	for _, bad := range []string{
		"redis://:" + secret + "@127.0.0.1/?maxlen=-1",
		"redis://:" + secret + "@127.0.0.1/?maxlen=many",
		"redis://:" + secret + "@127.0.0.1/?require_stream=maybe",
		"redis://:" + secret + "@127.0.0.1/?wait_timeout=5",
		"redis://:" + secret + "@127.0.0.1/?stream=a&stream=b",
		"redis://:" + secret + "@127.0.0.1/?streem=typo",
		"redis://:" + secret + "@127.0.0.1/notadb",
		"http://:" + secret + "@127.0.0.1/",
		"redis://:" + secret + "@127.0.0.1/?stream={nope}",
	} {
		u, _ := url.Parse(bad)
		_, err := outboxredis.NewFromURL(u)
		if err == nil {
			t.Errorf("NewFromURL(%q) accepted", bad)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("NewFromURL(%q): error shows the password: %v", bad, err)
		}
	}
}

func TestUnreachableIsUnavailableWithoutPassword(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const secret = "s3cr3t-pw"
	u, _ := url.Parse("redis://:" + secret + "@" + addr + "/0")
	pub, err := outboxredis.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i, err := range pub.PublishBatch(ctxFor(t, 10*time.Second), []*outbox.Message{publishertest.NewMessage("1", `{}`), publishertest.NewMessage("2", `{}`)}) {
		if outbox.Classify(err) != outbox.ClassUnavailable {
			t.Errorf("message %d to a closed port: %v (%s), want unavailable", i, err, outbox.Classify(err))
		}
		if strings.Contains(fmt.Sprint(err), secret) {
			t.Errorf("message %d: error shows the password: %v", i, err)
		}
	}
}

// TestConfigValidation: New refuses a bad field with a *outbox.ConfigError
// naming redis.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	for _, tc := range []struct {
		client goredis.UniversalClient
		cfg    outboxredis.Config
		field  string
	}{
		{c, outboxredis.Config{Stream: "{nope}"}, "Stream"},
		{c, outboxredis.Config{MaxLen: -1}, "MaxLen"},
		{c, outboxredis.Config{MaxValueSize: -1}, "MaxValueSize"},
		{c, outboxredis.Config{WaitReplicas: -1}, "WaitReplicas"},
		{c, outboxredis.Config{WaitReplicas: 1, WaitTimeout: time.Microsecond}, "WaitTimeout"},
		{c, outboxredis.Config{WaitTimeout: -time.Second}, "WaitTimeout"},
		{cluster, outboxredis.Config{WaitReplicas: 1}, "WaitReplicas"},
	} {
		_, err := outboxredis.New(tc.client, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "redis.Config", tc.field)
	}
	if _, err := outboxredis.New(nil, outboxredis.Config{}); err == nil || !strings.Contains(err.Error(), "client is nil") {
		t.Errorf("New(nil) = %v, want an error saying the client is nil", err)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultMaxValueSize":         outboxredis.DefaultMaxValueSize,
		"DefaultWaitTimeout":          outboxredis.DefaultWaitTimeout,
		"outbox.DefaultTopicTemplate": outbox.DefaultTopicTemplate,
	})
}

// ownServer starts a redis-server of the test's own on a Unix socket, for
// the cases that change server settings (maxmemory, ACL users), which the
// shared server must never see. Without the binary the test is skipped, or
// fails under CI=true.
func ownServer(t *testing.T, args ...string) *goredis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server binary: %v (CI=true: install the redis-server package)", err)
		}
		t.Skipf("needs the redis-server binary for a server of the test's own: %v", err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, append([]string{"--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := goredis.NewClient(&goredis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	testkit.Eventually(t, 10*time.Second, "own redis-server answering", func() bool { return c.Ping(context.Background()).Err() == nil })
	return c
}

// Out of memory and an ACL refusal hit every write alike: unavailable, so
// the relay backs off instead of dead-lettering the table.
func TestServerRefusalsAreUnavailable(t *testing.T) {
	t.Parallel()
	own := ownServer(t)
	ctx := ctxFor(t, 10*time.Second)
	pub := newPublisher(t, own, outboxredis.Config{Stream: "{event_type}"})
	if err := own.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err := pub.Publish(ctx, publishertest.NewMessage("1", `{}`))
	if outbox.Classify(err) != outbox.ClassUnavailable || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("publish with Redis out of memory: %v (%s), want an unavailable OOM", err, outbox.Classify(err))
	}
	if err := own.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := own.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read").Err(); err != nil {
		t.Fatal(err)
	}
	sock := own.Options().Addr
	reader := goredis.NewClient(&goredis.Options{Network: "unix", Addr: sock, Username: "reader", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { reader.Close() })
	err = newPublisher(t, reader, outboxredis.Config{}).Publish(ctx, publishertest.NewMessage("1", `{}`))
	if outbox.Classify(err) != outbox.ClassUnavailable || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("publish as a user without XADD: %v (%s), want an unavailable NOPERM", err, outbox.Classify(err))
	}
}

func TestParseURLTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testcerts.Write(t, dir) // any CA and client certificate will do
	u, _ := url.Parse(fmt.Sprintf("rediss://outbox:pw@h:6380/0?tls_ca=%s&tls_cert=%s&tls_key=%s",
		filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")))
	opts, _, err := outboxredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig == nil || opts.TLSConfig.RootCAs == nil || len(opts.TLSConfig.Certificates) != 1 ||
		opts.Username != "outbox" || opts.Password != "pw" {
		t.Errorf("options: TLS %+v, user %q", opts.TLSConfig, opts.Username)
	}
	for _, bad := range []string{
		"redis://h:6379/0?tls_ca=/ca.pem",
		"rediss://u:canary@h:6380/0?tls_ca=/nonexistent.pem",
		"rediss://h:6380/0?tls_cert=" + filepath.Join(dir, "client.pem"),
	} {
		u, _ := url.Parse(bad)
		_, _, err := outboxredis.ParseURL(u)
		if err == nil || strings.Contains(err.Error(), "canary") {
			t.Errorf("ParseURL(%s): %v, want an error without the password", bad, err)
		}
	}
}

// rediss:// with an ACL user, a private CA and a client certificate, against
// a redis-server of the test's own that requires them; without the client
// certificate, publishing is unavailable.
func TestTLSAndACLUserFromURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testcerts.Write(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	own := ownServer(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server-key.pem"), "--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", "yes")
	ctx := ctxFor(t, 30*time.Second)
	if err := own.Do(ctx, "ACL", "SETUSER", "outbox", "on", ">s3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("rediss://outbox:s3cret@127.0.0.1:%d/0?stream=tls&dial_timeout=2s&tls_ca=%s", port, filepath.Join(dir, "ca.pem"))
	publish := func(raw string) error {
		u, _ := url.Parse(raw)
		p, err := outboxredis.NewFromURL(u)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		return p.Publish(ctx, publishertest.NewMessage("1", `{}`))
	}
	if err := publish(base + "&tls_cert=" + filepath.Join(dir, "client.pem") + "&tls_key=" + filepath.Join(dir, "client-key.pem")); err != nil {
		t.Fatalf("publish over TLS with a client certificate as an ACL user: %v", err)
	}
	if n := own.XLen(ctx, "tls").Val(); n != 1 {
		t.Fatalf("stream holds %d entries, want 1", n)
	}
	if err := publish(base); outbox.Classify(err) != outbox.ClassUnavailable {
		t.Errorf("publish without the client certificate: %v (%s), want unavailable", err, outbox.Classify(err))
	}
}
