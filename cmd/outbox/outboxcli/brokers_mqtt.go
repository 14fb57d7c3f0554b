package outboxcli

import (
	"context"
	"io"
	"net/url"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/mqtt"
)

func init() {
	brokers["mqtt"] = openMQTT
	brokers["mqtts"] = openMQTT
}

// openMQTT: mqtt://user:pw@host:1883?topic=... (mqtts:// for TLS); --topic
// is the topic unless the URL sets topic=. MQTT has nothing to create: the
// consumers' persistent sessions are their own. See package mqtt.
func openMQTT(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	opts, cfg, err := mqtt.ParseURL(withOption(u, "topic", o.Topic))
	if err != nil {
		return nil, nil, err
	}
	cfg.Logger = o.Logger
	pub, err := mqtt.New(opts, cfg)
	if err != nil {
		return nil, nil, err
	}
	return pub, pub, nil
}
