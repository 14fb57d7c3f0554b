package publishertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
)

// JSONOfSize returns a valid JSON object of exactly n bytes (n >= 10).
func JSONOfSize(n int) []byte {
	const head, tail = `{"pad":"`, `"}`
	if n < len(head)+len(tail) {
		panic(fmt.Sprintf("publishertest: JSONOfSize(%d): too small", n))
	}
	b := make([]byte, 0, n)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte{'x'}, n-len(head)-len(tail))...)
	return append(b, tail...)
}

// isTimeout mirrors the relay's reading of a publish that ran out of time.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isDown reports an error the relay treats as "broker unreachable": classified
// unavailable, or a timeout (a batch in which nothing was confirmed in time).
func isDown(err error) bool {
	return err != nil && (outbox.Classify(err) == outbox.ClassUnavailable || isTimeout(err))
}

// readIDs reads from the broker until every id in want has been seen at least
// once or ctx ends. It returns how many copies of each id it saw.
func readIDs(ctx context.Context, b *Broker, want map[string][]byte) (map[string]int, error) {
	n := len(want)
	for {
		got, err := b.Read(ctx, n)
		seen := map[string]int{}
		var bad []string
		for _, r := range got {
			id := r.Headers[outbox.HeaderEventID]
			seen[id]++
			if p, ok := want[id]; ok && !bytes.Equal(p, r.Payload) {
				bad = append(bad, fmt.Sprintf("event %s: payload %q, want %q", id, r.Payload, p))
			}
		}
		if len(bad) > 0 {
			return seen, errors.New(strings.Join(bad, "; "))
		}
		missing := 0
		for id := range want {
			if seen[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return seen, nil
		}
		if err != nil || ctx.Err() != nil {
			return seen, fmt.Errorf("%d of %d events never reached the broker (read %d messages): %w", missing, len(want), len(got), errors.Join(err, ctx.Err()))
		}
		// Duplicates filled the count: ask for one more than we hold.
		n = len(got) + 1
	}
}

func testOversized(t *testing.T, b *Broker) {
	if b.MaxPayload == 0 {
		t.Skip("Broker.MaxPayload not set")
	}
	big := NewMessage("big", "{}")
	big.Payload = JSONOfSize(b.MaxPayload)
	err := b.Publisher.Publish(ctxFor(t, 60*time.Second), big)
	if err == nil {
		t.Fatalf("publishing %d bytes (Broker.MaxPayload) succeeded, want a permanent error", b.MaxPayload)
	}
	if c := outbox.Classify(err); c != outbox.ClassPermanent {
		t.Fatalf("publishing %d bytes: %s error %v, want permanent (retrying cannot shrink the message)", b.MaxPayload, c, err)
	}

	after := NewMessage("after", `{"after":"oversized"}`)
	if err := b.Publisher.Publish(ctxFor(t, 30*time.Second), after); err != nil {
		t.Fatalf("a normal message right after the oversized one: %v", err)
	}

	// In one batch the oversized message fails alone.
	batch := []*outbox.Message{NewMessage("b1", `{"n":1}`), NewMessage("big2", "{}"), NewMessage("b3", `{"n":3}`)}
	batch[1].Payload = big.Payload
	errs := publishAll(ctxFor(t, 60*time.Second), b.Publisher, batch)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("normal messages beside an oversized one in a batch: %v, %v; want both published", errs[0], errs[2])
	}
	if c := outbox.Classify(errs[1]); errs[1] == nil || c != outbox.ClassPermanent {
		t.Fatalf("oversized message inside a batch: %v (%s), want a permanent error", errs[1], c)
	}

	want := map[string][]byte{}
	for _, m := range []*outbox.Message{after, batch[0], batch[2]} {
		want[m.ID.String()] = m.Payload
	}
	seen, err := readIDs(ctxFor(t, 30*time.Second), b, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*outbox.Message{big, batch[1]} {
		if seen[m.ID.String()] > 0 {
			t.Errorf("oversized event %s reached the broker although Publish failed permanently", m.ID)
		}
	}
}

func testUnroutable(t *testing.T, b *Broker) {
	if b.Unroutable == nil {
		t.Skip("Broker.Unroutable not set")
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s to a destination that does not exist succeeded: the message was silently dropped", what)
		}
		c := outbox.Classify(err)
		switch {
		case b.UnroutablePerMessage && c == outbox.ClassUnavailable:
			t.Errorf("%s: error classified %s, want transient or permanent (Broker.UnroutablePerMessage): %v", what, c, err)
		case !b.UnroutablePerMessage && c != outbox.ClassUnavailable:
			// Every event for a missing destination fails alike: counting
			// attempts would turn the backlog into dead letters.
			t.Errorf("%s: error classified %s, want unavailable: %v", what, c, err)
		case !b.UnroutablePerMessage && !strings.Contains(err.Error(), b.UnroutableName):
			t.Errorf("%s: error does not name the missing destination %q: %v", what, b.UnroutableName, err)
		}
		t.Logf("%s: %s error: %v", what, c, err)
	}
	check("Publish", b.Unroutable.Publish(ctxFor(t, 30*time.Second), NewMessage("u1", `{"u":1}`)))
	msgs := []*outbox.Message{NewMessage("u2", `{"u":2}`), NewMessage("u3", `{"u":3}`), NewMessage("u4", `{"u":4}`)}
	for i, err := range publishAll(ctxFor(t, 30*time.Second), b.Unroutable, msgs) {
		check(fmt.Sprintf("batch message %d", i), err)
	}

	// The publisher for the real destination is unaffected.
	ok := NewMessage("ok", `{"routable":true}`)
	if err := b.Publisher.Publish(ctxFor(t, 30*time.Second), ok); err != nil {
		t.Fatalf("routable publish after unroutable ones: %v", err)
	}
	if _, err := readIDs(ctxFor(t, 30*time.Second), b, map[string][]byte{ok.ID.String(): ok.Payload}); err != nil {
		t.Fatal(err)
	}
}

// disconnect calls b.Disconnect and makes sure the broker is restored when
// the test ends, whatever happens; the returned function restores it (once).
func disconnect(t *testing.T, b *Broker) (restore func()) {
	t.Helper()
	r := b.Disconnect(t)
	var once sync.Once
	restore = func() { once.Do(r) }
	t.Cleanup(restore)
	return restore
}

func testDisconnected(t *testing.T, b *Broker) {
	if b.Disconnect == nil {
		t.Skip("Broker.Disconnect not set")
	}
	before := NewMessage("before", `{"phase":"before"}`)
	if err := b.Publisher.Publish(ctxFor(t, 30*time.Second), before); err != nil {
		t.Fatalf("publish before the outage: %v", err)
	}

	restore := disconnect(t, b)
	start := time.Now()
	if err := b.Publisher.Publish(ctxFor(t, 5*time.Second), NewMessage("cut", `{"phase":"cut"}`)); !isDown(err) {
		t.Fatalf("Publish while cut off: %v (%s), want an unavailable error or a timeout", err, outbox.Classify(err))
	}
	t.Logf("Publish while cut off failed after %s", time.Since(start).Round(time.Millisecond))
	cut := []*outbox.Message{NewMessage("cut2", `{"phase":"cut"}`), NewMessage("cut3", `{"phase":"cut"}`)}
	for i, err := range publishAll(ctxFor(t, 5*time.Second), b.Publisher, cut) {
		if !isDown(err) {
			t.Fatalf("batch message %d while cut off: %v (%s), want an unavailable error or a timeout", i, err, outbox.Classify(err))
		}
	}

	restore()
	// The publisher must recover by itself. Until it has, every failure must
	// still read as "unavailable", or the relay would count attempts for an
	// outage that is already over.
	after := NewMessage("after", `{"phase":"after"}`)
	deadline := time.Now().Add(30 * time.Second)
	for tries := 1; ; tries++ {
		err := b.Publisher.Publish(ctxFor(t, 5*time.Second), after)
		if err == nil {
			t.Logf("publish succeeded %s after restore, try %d", time.Since(start).Round(time.Millisecond), tries)
			break
		}
		if !isDown(err) {
			t.Fatalf("Publish after restore, try %d: %s error %v; while reconnecting, want unavailable", tries, outbox.Classify(err), err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("publisher did not recover within 30s of the broker coming back: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	want := map[string][]byte{before.ID.String(): before.Payload, after.ID.String(): after.Payload}
	if _, err := readIDs(ctxFor(t, 30*time.Second), b, want); err != nil {
		t.Fatal(err)
	}
}
