package engine

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// scanRows reads a claim's rows (a payload larger than
// store.InlinePayloadMax as stored comes as nil, with its stored size): a
// few allocations for all of them, in chunks that double up to the claim's
// limit, so a claim of two rows does not allocate (and clear, and collect)
// room for a thousand; ids as [16]byte (pgx's native uuid decoding;
// uuid.UUID would go through sql.Scanner and a text parse), headers decoded
// only when present. more reports a claim that says it stopped at its limit
// (the last column).
func scanRows(rows pgx.Rows, limit int) (batch []*Row, more bool, err error) {
	var (
		chunk    []Row
		id       [16]byte
		headers  []byte
		attempts int
		full     bool
	)
	for rows.Next() {
		if len(chunk) == cap(chunk) {
			chunk = make([]Row, 0, max(min(2*cap(chunk), limit-len(batch)), 16))
		}
		chunk = append(chunk, Row{})
		r := &chunk[len(chunk)-1]
		if err := rows.Scan(&id, &r.Seq, &r.AggregateType, &r.AggregateID, &r.EventType,
			&r.Payload, &r.stored, &headers, &r.CreatedAt, &attempts, &r.Failed, &r.Follower, &full); err != nil {
			rows.Close()
			return nil, false, err
		}
		batch = append(batch, r)
		more = more || full
		r.ID = id
		r.Attempt = attempts + 1 // the table counts the attempts made; this is the next one
		if headers != nil {
			if err := json.Unmarshal(headers, &r.Headers); err != nil {
				r.Headers = nil
				r.Bad = fmt.Errorf("headers %.200s: want a JSON object of string values: %v", headers, err)
			}
		}
	}
	return batch, more, rows.Err()
}
