package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
	"github.com/pgoutbox/outbox/publishertest"
)

func TestStreamSubjectsFor(t *testing.T) {
	t.Parallel()
	for tmpl, want := range map[string]string{
		"orders.{event_type}":                   "[orders.>]",
		"nc.cli.{event_type}":                   "[nc.cli.>]",
		"orders.{aggregate_id}.events":          "[orders.>]",
		"outbox.event.{aggregate_type}":         "[outbox.event.>]",
		"orders.v{event_type}":                  "[orders.>]",
		"orders.created":                        "[orders.created]",
		"orders":                                "[orders]",
		"{event_type}":                          "error",
		"":                                      "error",
		"{aggregate_type}.{event_type}.orders":  "error",
		"tenant-{aggregate_type}.{event_type}x": "error",
	} {
		got, err := outboxnats.StreamSubjectsFor(tmpl)
		if s := fmt.Sprint(got); (err != nil) != (want == "error") || (err == nil && s != want) {
			t.Errorf("StreamSubjectsFor(%q) = %v, %v; want %s", tmpl, got, err, want)
		}
	}
}

// streams makes the stream names and subject prefixes of one test, and
// deletes the streams when it ends.
func streams(t *testing.T) (jetstream.JetStream, func(string) string) {
	t.Helper()
	nc := testnats.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	base := strings.ToUpper(testdb.NewSchemaName("T"))
	var names []string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, n := range names {
			_ = js.DeleteStream(ctx, n)
		}
	})
	return js, func(suffix string) string {
		n := base + "_" + suffix
		names = append(names, n)
		return n
	}
}

// publishOnce publishes one message through a publisher made for the
// subject template and stream, waiting for the connection.
func publishOnce(t *testing.T, subject, stream string) error {
	t.Helper()
	pub, err := outboxnats.New(testnats.Conn(t), outboxnats.Config{Subject: subject, EnsureStream: stream})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pub.Publish(ctx, publishertest.NewMessage("1", `{}`))
}

func subjectsOf(t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return fmt.Sprint(s.CachedInfo().Config.Subjects)
}

// Two relays on sibling subjects (x.cli.{event_type}, x.wal.{event_type})
// each ensure a stream of exactly their subjects: the first no longer claims
// x.> and the second does not loop on "subjects overlap".
func TestEnsureStreamSiblingSubjects(t *testing.T) {
	t.Parallel()
	js, name := streams(t)
	cli, wal := name("CLI"), name("WAL")
	prefix := strings.TrimSuffix(cli, "_CLI")
	if err := publishOnce(t, prefix+".cli.{event_type}", cli); err != nil {
		t.Fatalf("first relay: %v", err)
	}
	if err := publishOnce(t, prefix+".wal.{event_type}", wal); err != nil {
		t.Fatalf("second relay, sibling subjects: %v", err)
	}
	if got := subjectsOf(t, js, cli); got != "["+prefix+".cli.>]" {
		t.Errorf("first stream's subjects = %s, want [%s.cli.>]", got, prefix)
	}
	if got := subjectsOf(t, js, wal); got != "["+prefix+".wal.>]" {
		t.Errorf("second stream's subjects = %s, want [%s.wal.>]", got, prefix)
	}
}

// A stream of another name that already captures the subjects is used as it
// is: nothing is created, and the message lands in it.
func TestEnsureStreamAcceptsAStreamThatCaptures(t *testing.T) {
	t.Parallel()
	js, name := streams(t)
	wide, mine := name("WIDE"), name("MINE")
	prefix := strings.TrimSuffix(wide, "_WIDE")
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wide, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if err := publishOnce(t, prefix+".wal.{event_type}", mine); err != nil {
		t.Fatalf("publish under a stream that captures: %v", err)
	}
	if _, err := js.Stream(ctx, mine); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream %s: %v, want it never created", mine, err)
	}
	s, _ := js.Stream(ctx, wide)
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("the capturing stream holds %v messages (%v), want 1", info.State.Msgs, err)
	}
}

// The named stream exists: the missing subjects are added and its other
// settings kept.
func TestEnsureStreamUpdatesKeepingSettings(t *testing.T) {
	t.Parallel()
	js, name := streams(t)
	mine := name("MINE")
	prefix := strings.TrimSuffix(mine, "_MINE")
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: mine, Subjects: []string{prefix + ".a.>"},
		Storage: jetstream.MemoryStorage, MaxAge: time.Hour, MaxMsgs: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := publishOnce(t, prefix+".b.{event_type}", mine); err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(ctx, mine)
	cfg := s.CachedInfo().Config
	if fmt.Sprint(cfg.Subjects) != "["+prefix+".a.> "+prefix+".b.>]" || cfg.MaxAge != time.Hour || cfg.MaxMsgs != 1000 ||
		cfg.Storage != jetstream.MemoryStorage {
		t.Errorf("updated stream = subjects %v, max age %s, max msgs %d, storage %s; want both subjects and the settings kept",
			cfg.Subjects, cfg.MaxAge, cfg.MaxMsgs, cfg.Storage)
	}
}

// Subjects that overlap another stream without being captured by it cannot
// be added: an outage whose error names that stream.
func TestEnsureStreamOverlapNamesTheStream(t *testing.T) {
	t.Parallel()
	js, name := streams(t)
	narrow, mine := name("NARROW"), name("MINE")
	prefix := strings.TrimSuffix(narrow, "_NARROW")
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: narrow, Subjects: []string{prefix + ".orders.*"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	err := publishOnce(t, prefix+".{event_type}", mine)
	if outbox.Classify(err) != outbox.ClassUnavailable || !strings.Contains(err.Error(), "overlaps stream "+narrow) ||
		!strings.Contains(err.Error(), "stream_subjects=") {
		t.Errorf("overlapping subjects: %v (%s), want an outage naming %s", err, outbox.Classify(err), narrow)
	}
}
