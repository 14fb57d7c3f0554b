package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/internal/ident"
)

// ErrNotOutboxTable is matched by ForeignTable's error; package outbox
// exports it as outbox.ErrNotOutboxTable.
var ErrNotOutboxTable = errors.New("not an outbox table")

// outboxColumns are the columns every outbox table has from migration 1 on
// (the reference design's table).
var outboxColumns = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "attempts", "created_at", "processed_at"}

// ForeignTable returns an error matching ErrNotOutboxTable when the table n
// names exists but lacks a column every outbox table has: some other table
// of that name, which migrating would fail on halfway. It returns nil for a
// missing table, an outbox table, or when the check itself fails (the
// caller's own error then stands). Migrate calls it before changing
// anything; the relay and package admin when a statement finds no table or
// column, to tell a foreign table from an unmigrated one.
func ForeignTable(ctx context.Context, q Querier, n ident.Names) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var exists bool
	var missing []string
	err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
       ARRAY(SELECT c FROM unnest($2::text[]) AS c
             WHERE NOT EXISTS (SELECT 1 FROM pg_attribute AS a
                               WHERE a.attrelid = to_regclass($1) AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped))`,
		n.QTable, outboxColumns).Scan(&exists, &missing)
	if err != nil || !exists || len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("outbox: table %s exists but is not an outbox table (it has no column %s): give the outbox another table name (--table, or Table in the config), or rename that table: %w",
		n.QTable, strings.Join(missing, ", "), ErrNotOutboxTable)
}
