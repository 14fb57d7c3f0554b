package store

// A plain INSERT may store timestamps no Go time.Time holds (±infinity) or
// no JSON encoder writes (years past 9999). The operator's statements read
// them through these expressions, so a listing or a count never fails on
// one row.

// shown is the timestamp col clamped to the years 1 to 9999: what lists
// and the console show (infinity shows as 9999-12-31, the row's last_error
// says why it is a dead letter).
func shown(col string) string {
	return `CASE WHEN ` + col + ` IS NOT NULL THEN LEAST(GREATEST(` + col + `, '0001-01-01 00:00:00+00'::timestamptz), '9999-12-31 23:59:59.999999+00'::timestamptz) END`
}

// finite is the timestamp col, NULL when it is ±infinity: what ages and
// due times are computed from.
func finite(col string) string {
	return `CASE WHEN isfinite(` + col + `) THEN ` + col + ` END`
}

// shownEventTimes are an event's four times, shown.
var shownEventTimes = shown("created_at") + `, ` + shown("processed_at") + `, ` + shown("retry_after") + `, ` + shown("dead_at")
