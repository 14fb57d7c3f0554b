package mqtt

import (
	"errors"
	"fmt"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox"
)

// classify wraps a publish token's error with the relay's class. In MQTT
// 3.1.1 a broker never refuses one message (it has no negative PUBACK), so
// every error a token can carry is about the connection (not connected,
// lost before the PUBACK, a write that timed out, packet ids exhausted):
// an outage, whatever the message.
func classify(err error, broker string) error {
	if errors.Is(err, paho.ErrNotConnected) {
		return outbox.Unavailable(fmt.Errorf("mqtt: not connected to %s: %w", broker, err))
	}
	return outbox.Unavailable(fmt.Errorf("mqtt: publish to %s: %w", broker, err))
}
