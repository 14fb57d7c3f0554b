package rabbitmq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/rabbitmq"
)

// A missing exchange is an outage whose error, from a publish and from the
// health check behind /readyz alike, names the exchange and both fixes, as
// an unroutable message names the queue to create.
func TestMissingExchangeNamesTheFix(t *testing.T) {
	t.Parallel()
	name := uniqueName("absent")
	pub := newPublisher(t, rabbitmq.Config{URL: brokerURL(), Exchange: name})
	err := pub.Publish(ctxFor(t, 10*time.Second), publishertest.NewMessage("1", `{}`))
	if outbox.Classify(err) != outbox.ClassUnavailable {
		t.Errorf("publish to a missing exchange: %v (%s), want unavailable", err, outbox.Classify(err))
	}
	for what, err := range map[string]error{"publish": err, "health": pub.Health(ctxFor(t, 10*time.Second))} {
		if err == nil {
			t.Errorf("%s with a missing exchange: no error", what)
			continue
		}
		for _, want := range []string{name, "does not exist", "rabbitmqadmin declare exchange name=" + name, "declare_exchange=topic"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s with a missing exchange: %q lacks %q", what, err, want)
			}
		}
	}
}
