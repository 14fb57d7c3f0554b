package kafkainbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
	"github.com/pgoutbox/outbox/inbox/kafkainbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/kafka"
)

const topic = "order.created"

// broker is one test's in-process Kafka (kfake, the real protocol over
// loopback TCP) with a 3-partition topic, and the outbox's own publisher
// (key = aggregate id, standard headers).
type broker struct {
	brokers []string
	pub     *kafka.Publisher
}

func newBroker(t *testing.T, _ *inboxtest.Env) *broker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	pub, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: "{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return &broker{brokers: c.ListenAddrs(), pub: pub}
}

// client is a member of the consumer group "shipping", as Run requires.
func (b *broker) client(t *testing.T) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumerGroup(inboxtest.Consumer), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseAllowingRebalance) // Close would wait for an AllowRebalance
	return cl
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	inboxtest.PublishAll(t, b.pub, msgs...)
}

// PublishInvalid uses the key of aggregate "0": the same partition as, and in
// front of, the next event of that aggregate.
func (b *broker) PublishInvalid(t *testing.T) {
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(inboxtest.Ctx(t), &kgo.Record{Topic: topic, Key: []byte("0"), Value: []byte(`{}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Start runs the adapter on a new group member; stop ends it and leaves the
// group. A handler error retries the record in place (Kafka has no nack).
func (b *broker) Start(t *testing.T, proc inbox.Processor) func() {
	t.Helper()
	cl := b.client(t)
	c, err := kafkainbox.New(proc, kafkainbox.Config{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return inboxtest.Background(t, func(ctx context.Context) error { return c.Run(ctx, cl) }, cl.CloseAllowingRebalance)
}

func (b *broker) ProcessThenCrash(t *testing.T, proc inbox.Processor, n int) {
	t.Helper()
	cl := b.client(t)
	for seen := 0; seen < n; {
		fs := cl.PollFetches(inboxtest.Ctx(t))
		if err := inboxtest.Ctx(t).Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			m, err := kafkainbox.ToMessage(r)
			if err != nil {
				t.Fatal(err)
			}
			if res, err := proc(inboxtest.Ctx(t), m); err != nil || res.Duplicate {
				t.Fatalf("crashing member: %+v %v", res, err)
			}
			seen++
		})
	}
	cl.CloseAllowingRebalance() // effects committed, offsets never committed
}

// CheckSettled: the group's committed offsets cover everything, so a new
// member, starting from them, first receives a record produced afterwards.
func (b *broker) CheckSettled(t *testing.T) {
	t.Helper()
	sentinel := inboxtest.Events(1)
	b.Publish(t, sentinel...)
	cl := b.client(t)
	c := inboxtest.Ctx(t)
	for {
		fs := cl.PollFetches(c)
		if err := c.Err(); err != nil {
			t.Fatalf("no sentinel record: %v", err)
		}
		var first *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if first == nil {
				first = r
			}
		})
		if first == nil {
			continue
		}
		m, err := kafkainbox.ToMessage(first)
		if err != nil {
			t.Fatalf("a new group member first received an unprocessed record (offset %d): %v", first.Offset, err)
		}
		if m.ID != sentinel[0].ID {
			t.Fatalf("a new group member first received %s (offset %d), not the sentinel: offsets were not committed", m.ID, first.Offset)
		}
		return
	}
}

func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T, e *inboxtest.Env) inboxtest.Adapter { return newBroker(t, e) })
}

func TestRunRefusesAutoCommit(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	c, err := kafkainbox.New(e.Processor(), kafkainbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]kgo.Opt{
		"autocommit": {kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic)},
		"no group":   {kgo.ConsumeTopics(topic)},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.brokers...)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Run(inboxtest.Ctx(t), cl); !errors.Is(err, kafkainbox.ErrAutoCommit) {
			t.Errorf("%s: Run = %v, want ErrAutoCommit", name, err)
		}
		cl.Close()
	}
}

// TestConfigValidation: New refuses a bad field with a
// *outboxtype.ConfigError naming kafkainbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   kafkainbox.Config
		field string
	}{
		{kafkainbox.Config{RetryBase: time.Second, RetryMax: time.Millisecond}, "RetryBase"},
		{kafkainbox.Config{MaxPoll: -1}, "MaxPoll"},
		{kafkainbox.Config{CommitTimeout: -1}, "CommitTimeout"},
	} {
		_, err := kafkainbox.New(proc, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "kafkainbox.Config", tc.field)
	}
	if _, err := kafkainbox.New(nil, kafkainbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultRetryBase":     kafkainbox.DefaultRetryBase,
		"DefaultRetryMax":      kafkainbox.DefaultRetryMax,
		"DefaultCommitTimeout": kafkainbox.DefaultCommitTimeout,
		"DefaultMaxPoll":       kafkainbox.DefaultMaxPoll,
	})
}
