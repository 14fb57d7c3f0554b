package engine

import "github.com/pgoutbox/outbox/internal/testkit"

// TestSignals are the engine steps that tests wait for instead of sleeping
// (internal/testkit). Each is off, and costs a nil check, unless a test
// calls Init before Run.
type TestSignals struct {
	// Idle: a worker's claim came back short, and the worker waits for the
	// relay's next poll. The value is the worker's number.
	Idle testkit.Signal[int]
	// Batch: a batch was published and settled, and recorded when it had
	// an outcome to record (either source).
	Batch testkit.Signal[Result]
	// Housekeeping: a stats round ended (held events, stuck detector,
	// gauges).
	Housekeeping testkit.Signal[struct{}]
	// SlotAttempt: while the WAL source relays from the table, an attempt
	// to create a fresh slot ended; nil when the slot was created.
	SlotAttempt testkit.Signal[error]
	// Rotation: a round of the partition rotation ended; its error.
	Rotation testkit.Signal[error]
}

// Init turns every signal on.
func (s *TestSignals) Init() {
	s.Idle.Init("worker idle")
	s.Batch.Init("batch recorded")
	s.Housekeeping.Init("housekeeping round")
	s.SlotAttempt.Init("slot attempt")
	s.Rotation.Init("partition rotation")
}
