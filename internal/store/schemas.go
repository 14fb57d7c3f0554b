package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// matchSchemas lists the schemas whose names match one of the LIKE
// patterns $1 (ident.SchemaPatterns), in byte order. PostgreSQL's own
// schemas are never matched: pg_catalog, the TOAST and temporary schemas,
// information_schema.
const matchSchemas = `SELECT nspname::text FROM pg_namespace
WHERE nspname::text LIKE ANY ($1::text[])
  AND nspname::text NOT LIKE 'pg\_%' AND nspname::text <> 'information_schema'
ORDER BY nspname::text COLLATE "C"`

// Schemas returns the schemas of the connected database whose names match
// one of likes.
func Schemas(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, likes []string) ([]string, error) {
	rows, err := q.Query(ctx, matchSchemas, likes)
	if err != nil {
		return nil, fmt.Errorf("list the schemas: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the schemas: %w", err)
	}
	return names, nil
}
