package engine

// SourceState is what the engine's source is doing (see outbox.SourceStatus).
type SourceState struct {
	Slot      string
	Streaming bool
	Standby   bool
	Fallback  bool
	Confirmed string
	Err       error
}

// SourceState reports the WAL source's state; the zero value for a table
// source.
func (e *Engine) SourceState() SourceState { return SourceState{} }
