package redisinbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
	"github.com/pgoutbox/outbox/inbox/redisinbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/redis"
)

func serverURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// broker is one test's Redis stream with the consumer group "shipping", and
// the outbox's own publisher.
type broker struct {
	client *goredis.Client
	stream string
	pub    *redis.Publisher
}

func newBroker(t *testing.T, _ *inboxtest.Env) *broker {
	t.Helper()
	opts, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	stream := testdb.NewSchemaName("pgoutbox.test.inbox")
	t.Cleanup(func() { client.Del(context.Background(), stream) })
	if err := redisinbox.EnsureGroup(inboxtest.Ctx(t), client, stream, inboxtest.Consumer); err != nil {
		t.Fatalf("Redis at %s: %v", serverURL(), err)
	}
	if err := redisinbox.EnsureGroup(inboxtest.Ctx(t), client, stream, inboxtest.Consumer); err != nil {
		t.Fatalf("EnsureGroup is not idempotent: %v", err)
	}
	pub, err := redis.New(client, redis.Config{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	return &broker{client: client, stream: stream, pub: pub}
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	inboxtest.PublishAll(t, b.pub, msgs...)
}

func (b *broker) PublishInvalid(t *testing.T) {
	if err := b.client.XAdd(inboxtest.Ctx(t), &goredis.XAddArgs{Stream: b.stream, Values: []any{"payload", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// Start runs consumer c2; a failed entry stays pending and is claimed again
// after ClaimIdle, which is also how c2 takes over a crashed c1's entries.
func (b *broker) Start(t *testing.T, proc inbox.Processor) func() {
	t.Helper()
	c, err := redisinbox.New(b.client, proc, redisinbox.Config{Stream: b.stream, Group: inboxtest.Consumer, Consumer: "c2",
		Block: 100 * time.Millisecond, ClaimIdle: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return inboxtest.Background(t, c.Run, nil)
}

func (b *broker) ProcessThenCrash(t *testing.T, proc inbox.Processor, n int) {
	t.Helper()
	streams, err := b.client.XReadGroup(inboxtest.Ctx(t), &goredis.XReadGroupArgs{
		Group: inboxtest.Consumer, Consumer: "c1", Streams: []string{b.stream, ">"}, Count: int64(n), Block: -1,
	}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(streams[0].Messages); got != n {
		t.Fatalf("c1 read %d entries, want %d", got, n)
	}
	for _, x := range streams[0].Messages {
		m, err := redisinbox.ToMessage(x)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := proc(inboxtest.Ctx(t), m); err != nil || res.Duplicate {
			t.Fatalf("c1: %+v %v", res, err)
		}
	}
	// The crash: c1 never acknowledges.
}

func (b *broker) CheckSettled(t *testing.T) {
	t.Helper()
	p, err := b.client.XPending(inboxtest.Ctx(t), b.stream, inboxtest.Consumer).Result()
	if err != nil {
		t.Fatal(err)
	}
	if p.Count != 0 {
		t.Errorf("pending entries = %d, want 0 (all XACKed)", p.Count)
	}
}

func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T, e *inboxtest.Env) inboxtest.Adapter { return newBroker(t, e) })
}

func TestRunWithoutGroup(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	c, err := redisinbox.New(b.client, e.Processor(), redisinbox.Config{Stream: b.stream, Group: "nobody", Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(inboxtest.Ctx(t)); err == nil || !strings.Contains(err.Error(), "NOGROUP") {
		t.Fatalf("Run = %v, want a NOGROUP error", err)
	}
}

// TestConfigValidation: New refuses a bad field with a
// *outboxtype.ConfigError naming redisinbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ok := redisinbox.Config{Stream: "s", Group: "g", Consumer: "c"}
	for _, tc := range []struct {
		mod   func(*redisinbox.Config)
		field string
	}{
		{func(c *redisinbox.Config) { c.Stream = "" }, "Stream"},
		{func(c *redisinbox.Config) { c.Group = "" }, "Group"},
		{func(c *redisinbox.Config) { c.Consumer = "" }, "Consumer"},
		{func(c *redisinbox.Config) { c.Count = -1 }, "Count"},
		{func(c *redisinbox.Config) { c.Block = -1 }, "Block"},
		{func(c *redisinbox.Config) { c.ClaimIdle = -1 }, "ClaimIdle"},
		{func(c *redisinbox.Config) { c.ClaimInterval = -1 }, "ClaimInterval"},
	} {
		cfg := ok
		tc.mod(&cfg)
		_, err := redisinbox.New(client, proc, cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", cfg), err, "redisinbox.Config", tc.field)
	}
	if _, err := redisinbox.New(client, nil, ok); err == nil {
		t.Error("New(nil processor) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultCount":     redisinbox.DefaultCount,
		"DefaultBlock":     redisinbox.DefaultBlock,
		"DefaultClaimIdle": redisinbox.DefaultClaimIdle,
	})
}
