package engine

import "github.com/jackc/pgx/v5/pgtype"

// uuids and uuidArg are event ids as bind parameters pgx encodes in every
// exec mode: [16]byte and [][16]byte have no type of their own in pgx's
// map, which the exec and simple_protocol modes (behind PgBouncer) need.
func uuids(ids [][16]byte) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}

func uuidArg(id [16]byte) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }
