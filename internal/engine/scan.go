package engine

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/outbox/internal/rowval"
)

// scanRows reads a claim's rows (a body, payload and headers, larger than
// store.InlinePayloadMax as stored comes as nil, with its stored size): a
// few allocations for all of them, in chunks that double up to the claim's
// limit, so a claim of two rows does not allocate (and clear, and collect)
// room for a thousand; ids as [16]byte (pgx's native uuid decoding;
// uuid.UUID would go through sql.Scanner and a text parse), headers decoded
// only when present (rowval.Headers), created_at read as a pgtype so that
// a row holding ±infinity is a dead letter, not a claim that fails. more reports a claim that says it stopped at its limit
// (the last column).
func scanRows(rows pgx.Rows, limit int) (batch []*Row, more bool, err error) {
	var (
		chunk    []Row
		id       [16]byte
		headers  []byte
		attempts int
		created  pgtype.Timestamptz
		full     bool
	)
	for rows.Next() {
		if len(chunk) == cap(chunk) {
			chunk = make([]Row, 0, max(min(2*cap(chunk), limit-len(batch)), 16))
		}
		chunk = append(chunk, Row{})
		r := &chunk[len(chunk)-1]
		if err := rows.Scan(&id, &r.Seq, &r.AggregateType, &r.AggregateID, &r.EventType,
			&r.Payload, &r.stored, &headers, &created, &attempts, &r.Failed, &r.Follower, &full); err != nil {
			rows.Close()
			return nil, false, err
		}
		batch = append(batch, r)
		more = more || full
		r.ID = id
		r.Attempt = max(attempts, 0) + 1 // the table counts the attempts made; this is the next one
		r.CreatedAt = created.Time
		if created.InfinityModifier != pgtype.Finite {
			r.Bad = rowval.InfiniteCreatedAt(created.InfinityModifier.String())
		}
		r.readHeaders(headers)
		headers = nil
	}
	return batch, more, rows.Err()
}

// readHeaders decodes a row's headers column; a value that is not an
// object makes the row Bad (a dead letter naming it).
func (r *Row) readHeaders(b []byte) {
	r.headerBytes = len(b)
	if b == nil || r.Bad != nil {
		return
	}
	var err error
	if r.Headers, err = rowval.Headers(b); err != nil {
		r.Bad = err
	}
}

// bodyBytes is what the row holds in memory of its payload and headers.
func (r *Row) bodyBytes() int { return len(r.Payload) + r.headerBytes }
