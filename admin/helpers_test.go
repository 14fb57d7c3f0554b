package admin_test

import (
	"testing"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// env is one test's isolated outbox (testenv.Env, shared with the root
// package's tests), with the helpers of this package's tests.
type env struct{ *testenv.Env }

func setup(t *testing.T) *env {
	t.Helper()
	return &env{testenv.Setup(t)}
}

// The shared helpers that take no env.
var (
	ctx    = testenv.Ctx
	event  = testenv.Event
	gauge  = testenv.Gauge
	aggIDs = testenv.AggIDs
)
