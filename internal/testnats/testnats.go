// Package testnats connects tests to the local NATS JetStream server
// (NATS_URL, default nats://127.0.0.1:4222) and gives each test a stream of
// its own.
package testnats

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// URL returns the NATS server's URL.
func URL() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// Conn connects to NATS and closes the connection when the test ends.
func Conn(t testing.TB, opts ...natsgo.Option) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(URL(), opts...)
	if err != nil {
		t.Fatalf("testnats: connect to %s: %v", URL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Stream creates a stream capturing "<prefix>.>" for a fresh prefix, deleted
// when the test ends. It returns the stream and the prefix.
func Stream(t testing.TB, nc *natsgo.Conn) (jetstream.Stream, string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.ToUpper(testdb.NewSchemaName("T"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: prefix, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("testnats: create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, prefix)
	})
	return s, prefix
}
