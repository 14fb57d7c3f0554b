package ident

// ReadyIndex is the outbox table's index of the rows the relay may claim
// now (pending, not scheduled for later), unqualified.
func (n Names) ReadyIndex() (string, error) { return n.local("ready index", n.Table+"_ready_idx") }

// ScheduledIndex is the outbox table's index of unprocessed rows scheduled
// for later delivery, by due time, unqualified.
func (n Names) ScheduledIndex() (string, error) {
	return n.local("scheduled index", n.Table+"_sched_idx")
}

// HandoffIndex is the outbox table's index of the rows a WAL relay's table
// workers claim (those the stream handed over), unqualified.
func (n Names) HandoffIndex() (string, error) {
	return n.local("handoff index", n.Table+"_handoff_idx")
}

// HandoffOrderIndex is the outbox table's index of the unprocessed rows on
// a WAL relay's table path, by aggregate and seq: the stream's order check
// finds each aggregate's first one in one probe, unqualified.
func (n Names) HandoffOrderIndex() (string, error) {
	return n.local("handoff order index", n.Table+"_handoff_agg_idx")
}

// HeldIndex is the outbox table's index of the events parked behind a
// failing event of their aggregate, by holder, unqualified.
func (n Names) HeldIndex() (string, error) { return n.local("held index", n.Table+"_held_idx") }

// RetryIndex is the outbox table's index of the pending events that failed
// and wait for a retry (or, in WAL mode, were handed to the table path), by
// retry time, unqualified.
func (n Names) RetryIndex() (string, error) { return n.local("retry index", n.Table+"_retry_idx") }

// DeadLetterIndex is the outbox table's index of its dead letters proper
// (held events left out), unqualified.
func (n Names) DeadLetterIndex() (string, error) {
	return n.local("dead-letter index", n.Table+"_dlq_idx")
}
