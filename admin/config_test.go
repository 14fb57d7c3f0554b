package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestNewConfigError: New refuses a bad field with a *outbox.ConfigError
// naming admin.Config and the field.
func TestNewConfigError(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	for field, cfg := range map[string]admin.Config{
		"Table":      {Table: strings.Repeat("t", 64)},
		"Schema":     {Schema: "a\x00b"},
		"StuckAfter": {StuckAfter: -time.Second},
	} {
		_, err := admin.New(pool, cfg)
		configcheck.Refused(t, "New", err, "admin.Config", field)
	}
}

// TestDocumentedDefaults: each "Defaults to DefaultX (v)." in the package's
// docs shows the constant's value.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultStatementTimeout":  admin.DefaultStatementTimeout,
		"DefaultReplayBatch":       admin.DefaultReplayBatch,
		"DefaultReplayLockTimeout": admin.DefaultReplayLockTimeout,
		"DefaultReplaySample":      admin.DefaultReplaySample,
		"DefaultTimelineLimit":     admin.DefaultTimelineLimit,
		"DefaultTimelineWindow":    admin.DefaultTimelineWindow,
		"outbox.DefaultStuckAfter": outbox.DefaultStuckAfter,
	})
}
