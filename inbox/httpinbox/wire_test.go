package httpinbox_test

import (
	"testing"

	"github.com/pgoutbox/outbox/inbox/httpinbox"
	"github.com/pgoutbox/outbox/outboxtype"
	"github.com/pgoutbox/outbox/webhook"
)

// httpinbox reads the publisher's wire format from outboxtype, not from
// package webhook (which it does not link): both must agree.
func TestWireFormatMatchesPublisher(t *testing.T) {
	t.Parallel()
	if outboxtype.WebhookHeaderPrefix != webhook.HeaderRowPrefix {
		t.Errorf("outboxtype.WebhookHeaderPrefix = %q, webhook.HeaderRowPrefix = %q", outboxtype.WebhookHeaderPrefix, webhook.HeaderRowPrefix)
	}
	if httpinbox.DefaultMaxBodyBytes != webhook.DefaultMaxBodyBytes {
		t.Errorf("httpinbox.DefaultMaxBodyBytes = %d, webhook.DefaultMaxBodyBytes = %d", httpinbox.DefaultMaxBodyBytes, webhook.DefaultMaxBodyBytes)
	}
}
