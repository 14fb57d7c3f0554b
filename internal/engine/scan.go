package engine

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// scanRows reads a claim's rows (a payload larger than
// store.InlinePayloadMax as stored comes as nil, with its stored size): one allocation for all of them, ids as
// [16]byte (pgx's native uuid decoding; uuid.UUID would go through
// sql.Scanner and a text parse), headers decoded only when present. more
// reports a claim that says it stopped at its limit (the last column).
func scanRows(rows pgx.Rows, limit int) (batch []*Row, more bool, err error) {
	backing := make([]Row, 0, limit)
	var (
		id       [16]byte
		headers  []byte
		attempts int
		full     bool
	)
	for rows.Next() {
		backing = append(backing, Row{})
		r := &backing[len(backing)-1]
		if err := rows.Scan(&id, &r.Seq, &r.AggregateType, &r.AggregateID, &r.EventType,
			&r.Payload, &r.stored, &headers, &r.CreatedAt, &attempts, &r.Failed, &r.Follower, &full); err != nil {
			rows.Close()
			return nil, false, err
		}
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
	out := make([]*Row, len(backing))
	for i := range backing {
		out[i] = &backing[i]
	}
	return out, more, rows.Err()
}
