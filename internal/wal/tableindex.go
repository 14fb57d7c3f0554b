package wal

import (
	"context"
	"fmt"
	"strings"
)

// A table set up for the WAL source does without the two indexes that only
// a table source reads on rows as their writers inserted them: the ready
// index (the claims) and the aggregate index (ordered claims). The stream
// reads those rows from the WAL, and a WAL relay's table workers claim
// through the handoff indexes, which hold the handed-over rows alone. So
// each event costs its writer two index entries fewer, and the walsender
// two WAL records fewer to decode. The definitions below are those of
// migrations 3 and 6; TestSetupReplicationSetsTableUp compares them with a
// migrated table's.

// tableSourceIndex is one of those indexes: its quoted, unqualified name
// and its definition after the name.
type tableSourceIndex struct{ name, def string }

func (n Names) tableSourceIndexes() ([]tableSourceIndex, error) {
	ready, err := n.Table.ReadyIndex()
	if err != nil {
		return nil, err
	}
	return []tableSourceIndex{
		{ready, " ON " + n.Table.QTable + " (seq) WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL"},
		{n.Table.AggregateIndex, " ON " + n.Table.QTable + " (aggregate_type, aggregate_id, seq) WHERE processed_at IS NULL"},
	}, nil
}

// qualify is an index name as DROP INDEX and to_regclass take it.
func (n Names) qualify(idx string) string {
	if n.Table.QSchema != "" {
		return n.Table.QSchema + "." + idx
	}
	return idx
}

// eachTableSourceIndex maps the indexes only a table source reads to f's
// strings.
func (n Names) eachTableSourceIndex(f func(tableSourceIndex) string) ([]string, error) {
	idx, err := n.tableSourceIndexes()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(idx))
	for i, x := range idx {
		out[i] = f(x)
	}
	return out, nil
}

// TableSourceIndexes are the qualified names of the indexes that only a
// table source reads, as to_regclass takes them.
func (n Names) TableSourceIndexes() ([]string, error) {
	return n.eachTableSourceIndex(func(x tableSourceIndex) string { return n.qualify(x.name) })
}

// DropTableSourceIndexesSQL are the statements SetupReplication runs once
// the slot exists. CONCURRENTLY: writers are not blocked meanwhile.
func (n Names) DropTableSourceIndexesSQL() ([]string, error) {
	return n.eachTableSourceIndex(func(x tableSourceIndex) string {
		return "DROP INDEX CONCURRENTLY IF EXISTS " + n.qualify(x.name)
	})
}

// CreateTableSourceIndexesSQL are the statements that set the table up for
// the table source again (DropReplication runs them).
func (n Names) CreateTableSourceIndexesSQL() ([]string, error) {
	return n.eachTableSourceIndex(func(x tableSourceIndex) string {
		return "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + x.name + x.def
	})
}

// DropTableSourceIndexes drops the indexes only a table source reads. Each
// DROP INDEX CONCURRENTLY waits for the transactions using the table to end
// and blocks no writer; it runs outside a transaction.
func DropTableSourceIndexes(ctx context.Context, db DB, n Names) error {
	stmts, err := n.DropTableSourceIndexesSQL()
	if err != nil {
		return fmt.Errorf("WAL source: %w", err)
	}
	part, err := isPartitioned(ctx, db, n)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if part {
			// PostgreSQL builds and drops a partitioned table's indexes
			// only without CONCURRENTLY; on a new table that is a moment.
			s = strings.Replace(s, " CONCURRENTLY", "", 1)
		}
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("WAL source: drop the table source's indexes of %s: %w", n.Table.QTable, err)
		}
	}
	return nil
}

// CreateTableSourceIndexes creates the indexes a table source reads, unless
// they exist; an invalid one (a concurrent build that failed midway) is
// dropped and built again. A table without the relay's columns (the
// article's minimal table) has neither and gets neither.
func CreateTableSourceIndexes(ctx context.Context, db DB, n Names) error {
	idx, err := n.tableSourceIndexes()
	if err != nil {
		return fmt.Errorf("WAL source: %w", err)
	}
	part, err := isPartitioned(ctx, db, n)
	if err != nil {
		return err
	}
	concurrently := " CONCURRENTLY"
	if part {
		// Not possible on a partitioned table: the build blocks writes,
		// for as long as reading the partitions' undelivered rows takes.
		concurrently = ""
	}
	for _, x := range idx {
		q := n.qualify(x.name)
		var invalid bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)`, q).Scan(&invalid); err != nil {
			return fmt.Errorf("WAL source: look up index %s: %w", q, err)
		}
		if invalid {
			if _, err := db.Exec(ctx, "DROP INDEX"+concurrently+" IF EXISTS "+q); err != nil {
				return fmt.Errorf("WAL source: drop invalid index %s: %w", q, err)
			}
		}
		if _, err := db.Exec(ctx, "CREATE INDEX"+concurrently+" IF NOT EXISTS "+x.name+x.def); err != nil {
			if isCode(err, "42703") { // undefined_column: no relay columns
				return nil
			}
			if createdMeanwhile(err) {
				continue
			}
			return fmt.Errorf("WAL source: create index %s: %w", q, err)
		}
	}
	return nil
}

// isPartitioned reports whether the outbox table is partitioned.
func isPartitioned(ctx context.Context, db DB, n Names) (bool, error) {
	var part bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass($1) AND relkind = 'p')`, n.Table.QTable).Scan(&part)
	if err != nil {
		return false, fmt.Errorf("WAL source: read the table's kind: %w", err)
	}
	return part, nil
}

// HasTableSourceIndexes reports whether the table has both indexes a table
// source reads (false: it was set up for the WAL source).
func HasTableSourceIndexes(ctx context.Context, db DB, n Names) (bool, error) {
	names, err := n.TableSourceIndexes()
	if err != nil {
		return false, err
	}
	var all bool
	err = db.QueryRow(ctx, `SELECT bool_and(to_regclass(i) IS NOT NULL) FROM unnest($1::text[]) AS i`, names).Scan(&all)
	return all, err
}

// handoffIndexNames are the qualified names of HandoffIndexSQL's indexes,
// in its order.
func (n Names) handoffIndexNames() ([]string, error) {
	idx, agg, err := n.handoffIndexes()
	if err != nil {
		return nil, err
	}
	return []string{n.qualify(idx), n.qualify(agg)}, nil
}
