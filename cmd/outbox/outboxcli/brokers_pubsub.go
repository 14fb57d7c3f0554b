package outboxcli

import (
	"context"
	"io"
	"net/url"
	"strings"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/pubsub"
)

func init() {
	brokers["pubsub"] = openPubSub
}

// openPubSub: pubsub://PROJECT/TOPIC-TEMPLATE?emulator=host:port; the URL's
// path (or topic=) is the topic template, --topic when it names none.
// Credentials come from Application Default Credentials. See package pubsub.
func openPubSub(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	if strings.Trim(u.Path, "/") == "" {
		u = withOption(u, "topic", o.Topic)
	}
	if o.CreateTopology {
		u = withOption(u, "create_topics", "true")
	}
	pub, err := pubsub.NewFromURL(u)
	if err != nil {
		return nil, nil, err
	}
	return pub, pub, nil
}
