package outboxtype_test

import (
	"errors"
	"testing"

	"github.com/pgoutbox/outbox/outboxtype"
)

// TestConfigErrorText: the text reads "pkg: Type.Field: reason", the
// package taken from a qualified Config and "outbox" for a bare one.
func TestConfigErrorText(t *testing.T) {
	t.Parallel()
	reason := errors.New("must be positive")
	for _, tc := range []struct{ config, want string }{
		{"RelayConfig", "outbox: RelayConfig.BatchSize: must be positive"},
		{"nats.Config", "nats: Config.BatchSize: must be positive"},
		{"kafkainbox.Config", "kafkainbox: Config.BatchSize: must be positive"},
	} {
		err := error(&outboxtype.ConfigError{Config: tc.config, Field: "BatchSize", Err: reason})
		if got := err.Error(); got != tc.want {
			t.Errorf("Config %q: Error() = %q, want %q", tc.config, got, tc.want)
		}
		if !errors.Is(err, reason) {
			t.Errorf("Config %q: errors.Is(err, reason) = false: Unwrap lost the reason", tc.config)
		}
	}
}
