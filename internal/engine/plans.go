package engine

// The relay's statements run as prepared statements (pgx caches them per
// connection), and PostgreSQL switches a prepared statement to a generic
// plan after five executions when that plan looks no dearer, then keeps it
// until the table's statistics change. An outbox table often starts empty
// and grows without a new ANALYZE (autovacuum off, or behind on a busy
// server): the generic plan made while it was tiny scans the whole table,
// and every mark (UPDATE … WHERE id = ANY($1)) then reads every row the
// table keeps, at each claim, on each connection that cached it. A custom
// plan is made for the table as it is at each execution and finds the rows
// by key: about 0.1 ms of planning per statement, against a scan that
// grows with the table.
const (
	planCacheMode = "plan_cache_mode"
	forceCustom   = "force_custom_plan"
)

// store.CustomPlans is the set_config call that plans the rest of a
// transaction's statements with their parameters. A lease sets it in the round trip of
// its first statement that finds rows by id (the mark, a payload fetch, an
// attempt count), not before the claim: the claim reads the partial
// indexes of pending rows, which even a generic plan made on a tiny table
// uses, and keeps its cached plan; and while the batch publishes,
// pg_stat_activity shows the claim as the session's last statement. The
// ordered mark with failures (MarkOrdered) keeps its cached plan too: see
// record. The WAL source's order check and record set it as well.
