package admin

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidArgs is ids as a bind parameter pgx encodes in every exec mode.
// []uuid.UUID has no type of its own in pgx's map: the modes that ask the
// server for the parameters' types (cache_statement, cache_describe)
// encode it as uuid[], but exec and simple_protocol, the modes used behind
// a transaction pooler, fail ("unable to encode []uuid.UUID").
// A nil ids stays nil: SQL NULL, as a nil []uuid.UUID is.
func uuidArgs(ids []uuid.UUID) []pgtype.UUID {
	if ids == nil {
		return nil
	}
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}
