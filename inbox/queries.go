package inbox

// Every statement the inbox runs at delivery time, built once per table from
// quoted identifiers. User values are always bind parameters.
type queries struct {
	// record claims the event for this consumer. Its row lock is what makes a
	// concurrent delivery of the same event wait, then see the conflict.
	record string
	// cleanup deletes one bounded batch of this consumer's old rows;
	// SKIP LOCKED keeps concurrent cleanups from queueing behind each other.
	cleanup string
}

func newQueries(n names) queries {
	return queries{
		record: `INSERT INTO ` + n.QTable + ` (consumer, event_id) VALUES ($1, $2::uuid) ON CONFLICT DO NOTHING`,
		cleanup: `DELETE FROM ` + n.QTable + ` WHERE (consumer, event_id) IN (
    SELECT consumer, event_id FROM ` + n.QTable + `
    WHERE consumer = $1 AND processed_at < now() - make_interval(secs => $2::float8)
    ORDER BY processed_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED)`,
	}
}
