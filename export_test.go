package outbox

import (
	"context"

	"github.com/pgoutbox/outbox/internal/engine"
)

// ClaimFloor exposes the relay's claim floor to the tests of package
// outbox_test.
func ClaimFloor(r *Relay) int64 { return r.eng.Floor() }

// ProcessBatchFull runs one batch like ProcessBatch and also reports whether
// the engine saw it as full (more rows likely waiting: claim again at once).
func ProcessBatchFull(r *Relay, ctx context.Context) (BatchResult, bool, error) {
	res, err := r.eng.Batch(ctx)
	return BatchResult{Claimed: res.Claimed, Published: res.Published}, res.Full, err
}

// Signals exposes the engine's test signals (internal/engine/signals.go) to
// the tests of package outbox_test; call Init on them before running r.
func Signals(r *Relay) *engine.TestSignals { return &r.eng.Signals }
