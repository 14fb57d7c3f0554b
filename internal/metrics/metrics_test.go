package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestInvalidUTF8EventType: an event type that is not UTF-8 (read from a
// SQL_ASCII database) is recorded under a repaired label, not a panic.
func TestInvalidUTF8EventType(t *testing.T) {
	t.Parallel()
	m, err := New(prometheus.NewRegistry(), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	bad := "commande.cr\xe9\xe9e"
	m.ObservePublished(bad, time.Now(), time.Now())
	m.Failed.WithLabelValues(Label(bad)).Inc()
	if got := Label(bad); got != "commande.cr\uFFFDe" {
		t.Fatalf("Label(%q) = %q", bad, got)
	}
	if got := Label("commande.créée"); got != "commande.créée" {
		t.Fatalf("a valid label changed: %q", got)
	}
}
