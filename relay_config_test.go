package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
	"github.com/pgoutbox/outbox/outboxtype"
)

// TestRelayConfigValidate: Validate returns the very error NewRelay returns,
// a *ConfigError naming RelayConfig and the field, and nil for what NewRelay
// accepts.
func TestRelayConfigValidate(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	cases := map[string]outbox.RelayConfig{
		"BatchSize":         {BatchSize: 10001},
		"Workers":           {Workers: 257},
		"PollInterval":      {PollInterval: time.Microsecond},
		"MaxAttempts":       {MaxAttempts: -1},
		"OutageBackoff":     {OutageBackoff: outbox.Backoff{Base: time.Minute, Max: time.Second}},
		"StatsInterval":     {StatsInterval: -time.Second},
		"CleanupInterval":   {CleanupInterval: -time.Second},
		"CleanupBatch":      {CleanupBatch: -1},
		"RotateEvents":      {RotateEvents: -1},
		"RotateInterval":    {RotateInterval: time.Millisecond},
		"StuckAfter":        {StuckAfter: -time.Second},
		"Source":            {Source: "kafka"},
		"Envelope":          {Envelope: "xml"},
		"CloudEventsSource": {CloudEventsSource: "/orders"},
		"Table":             {Table: "a\nb"},
	}
	for field, cfg := range cases {
		err := cfg.Validate()
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || ce.Config != "RelayConfig" || ce.Field != field {
			t.Errorf("%s: Validate() = %#v, want a *ConfigError naming RelayConfig.%s", field, err, field)
			continue
		}
		_, nerr := outbox.NewRelay(pool, memory.New(), cfg)
		if nerr == nil || nerr.Error() != err.Error() {
			t.Errorf("%s: Validate() = %q, NewRelay = %v: want the same error", field, err, nerr)
		}
	}
	for _, cfg := range []outbox.RelayConfig{{}, {Source: outbox.SourceWAL, BatchSize: 10000, Envelope: outbox.EnvelopeCloudEvents, CloudEventsSource: "/orders"}} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", cfg, err)
		}
	}
}

// TestConfigErrorShared: outbox.ConfigError is outboxtype.ConfigError, so
// errors.As with either finds what a constructor of either side returns.
func TestConfigErrorShared(t *testing.T) {
	t.Parallel()
	err := outbox.RelayConfig{Workers: -1}.Validate()
	var ce *outboxtype.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Workers" {
		t.Errorf("errors.As(%v, *outboxtype.ConfigError) found %v, want Workers", err, ce)
	}
	err = &outboxtype.ConfigError{Config: "nats.Config", Field: "MaxPending", Err: errors.New("must be positive")}
	var oce *outbox.ConfigError
	if !errors.As(err, &oce) || oce.Config != "nats.Config" {
		t.Errorf("errors.As(%v, *outbox.ConfigError) = false, want the nats.Config error", err)
	}
	if want := "nats: Config.MaxPending: must be positive"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
}

// TestConstructorsConfigError: every root constructor names its config and
// the refused field.
func TestConstructorsConfigError(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	long := strings.Repeat("t", 64)
	for _, tc := range []struct {
		config, field string
		err           func() error
	}{
		{"WriterConfig", "Table", func() error { _, err := outbox.NewWriter(outbox.WriterConfig{Table: long}); return err }},
		{"WriterConfig", "Schema", func() error { _, err := outbox.NewWriter(outbox.WriterConfig{Schema: "a\x00b"}); return err }},
		{"NotifierConfig", "Table", func() error {
			_, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Table: long})
			return err
		}},
		{"NotifierConfig", "Interval", func() error {
			_, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Interval: -time.Millisecond})
			return err
		}},
		{"NotifierConfig", "MaxInterval", func() error {
			_, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Interval: time.Second, MaxInterval: time.Millisecond})
			return err
		}},
		{"NotifierConfig", "SlowAbove", func() error {
			_, err := outbox.NewNotifier(pool, outbox.NotifierConfig{SlowAbove: -1})
			return err
		}},
		{"MigrateConfig", "Table", func() error { _, err := outbox.MigrationSQL(outbox.MigrateConfig{Table: long}); return err }},
	} {
		err := tc.err()
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || ce.Config != tc.config || ce.Field != tc.field {
			t.Errorf("%s.%s: err = %#v, want a *ConfigError naming it", tc.config, tc.field, err)
		}
	}
}

// TestDocumentedDefaults: each "Defaults to DefaultX (v)." in the package's
// docs shows the constant's value.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultTable":             outbox.DefaultTable,
		"DefaultMaxPayloadBytes":   outbox.DefaultMaxPayloadBytes,
		"DefaultBatchSize":         outbox.DefaultBatchSize,
		"DefaultWorkers":           outbox.DefaultWorkers,
		"DefaultPollInterval":      outbox.DefaultPollInterval,
		"DefaultMaxAttempts":       outbox.DefaultMaxAttempts,
		"DefaultRetryBase":         outbox.DefaultRetryBase,
		"DefaultRetryMax":          outbox.DefaultRetryMax,
		"DefaultOutageBase":        outbox.DefaultOutageBase,
		"DefaultOutageMax":         outbox.DefaultOutageMax,
		"DefaultPublishTimeout":    outbox.DefaultPublishTimeout,
		"DefaultStatsInterval":     outbox.DefaultStatsInterval,
		"DefaultCleanupInterval":   outbox.DefaultCleanupInterval,
		"DefaultCleanupBatch":      outbox.DefaultCleanupBatch,
		"DefaultRescanInterval":    outbox.DefaultRescanInterval,
		"DefaultBatchDelay":        outbox.DefaultBatchDelay,
		"DefaultBatchDelayAbove":   outbox.DefaultBatchDelayAbove,
		"DefaultStatementTimeout":  outbox.DefaultStatementTimeout,
		"DefaultMaxBatchBytes":     outbox.DefaultMaxBatchBytes,
		"DefaultRotateEvents":      outbox.DefaultRotateEvents,
		"DefaultRotateInterval":    outbox.DefaultRotateInterval,
		"DefaultWALSenderTimeout":  outbox.DefaultWALSenderTimeout,
		"DefaultStuckAfter":        outbox.DefaultStuckAfter,
		"DefaultNotifyInterval":    outbox.DefaultNotifyInterval,
		"DefaultNotifyMaxInterval": outbox.DefaultNotifyMaxInterval,
		"DefaultNotifySlowAbove":   outbox.DefaultNotifySlowAbove,
	})
}
