//go:build noembeddednats

package outboxcli

// The daemon's build (-tags noembeddednats) leaves nats-server out: it is
// most of the binary, and only the demo without --broker needs it.
func startEmbeddedNATS() (embeddedBroker, error) { return nil, errNoEmbeddedNATS }
