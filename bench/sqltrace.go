package main

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sqlTracer counts and times a relay's statements (--wal-profile): the
// statements per event and round trips per event of each kind, and the
// time the relay waited on each, which the engine does not report itself.
// A query or Exec is one round trip; a batch (pgx.Batch, sent in one
// write and read back in one go) is one round trip for all its statements.
type sqlTracer struct {
	schema string // replaced by "S" in the kinds: runs compare
	mu     sync.Mutex
	kinds  map[string]*sqlStat
}

// sqlStat is one kind of statement: its first words (literals and
// identifiers as written, numbers and parameters folded).
type sqlStat struct {
	Key        string  `json:"key"`
	Calls      int64   `json:"calls"`       // statements run
	RoundTrips int64   `json:"round_trips"` // queries, plus batches counted once
	Ms         float64 `json:"ms"`          // wall time waiting for them, summed
}

type traceKey struct{}

// untracedKey marks the harness's own statements on a traced pool.
type untracedKey struct{}

func untraced(ctx context.Context) context.Context {
	return context.WithValue(ctx, untracedKey{}, true)
}

type traceStart struct {
	key   string
	start time.Time
}

func newSQLTracer(schema string) *sqlTracer {
	return &sqlTracer{schema: schema, kinds: map[string]*sqlStat{}}
}

var (
	sqlSpace  = regexp.MustCompile(`\s+`)
	sqlNumber = regexp.MustCompile(`\$\d+|\b\d+\b`)
)

// sqlKey folds a statement to its kind: whitespace collapsed, numbers and
// parameters replaced, cut to 90 characters.
func sqlKey(sql string) string {
	k := sqlNumber.ReplaceAllString(sqlSpace.ReplaceAllString(strings.TrimSpace(sql), " "), "N")
	if len(k) > 90 {
		k = k[:90] + "…"
	}
	return k
}

func (t *sqlTracer) add(key string, calls, trips int64, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.kinds[key]
	if s == nil {
		s = &sqlStat{Key: key}
		t.kinds[key] = s
	}
	s.Calls += calls
	s.RoundTrips += trips
	s.Ms += float64(d) / 1e6
}

func (t *sqlTracer) key(sql string) string {
	if t.schema != "" {
		sql = strings.ReplaceAll(sql, `"`+t.schema+`"`, "S")
	}
	return sqlKey(sql)
}

func (t *sqlTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if ctx.Value(untracedKey{}) != nil {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, traceStart{key: t.key(data.SQL), start: time.Now()})
}

func (t *sqlTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if st, ok := ctx.Value(traceKey{}).(traceStart); ok {
		t.add(st.key, 1, 1, time.Since(st.start))
	}
}

// A batch: each statement counted, the batch's wall time and its one round
// trip charged to its first statement's kind (prefixed "batch: ").
type batchTrace struct {
	start time.Time
	first string
	n     int64
	mu    sync.Mutex
}

func (t *sqlTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if ctx.Value(untracedKey{}) != nil {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, &batchTrace{start: time.Now()})
}

func (t *sqlTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if b, ok := ctx.Value(traceKey{}).(*batchTrace); ok {
		b.mu.Lock()
		if b.n == 0 {
			b.first = t.key(data.SQL)
		}
		b.n++
		b.mu.Unlock()
		if b.n > 1 {
			t.add("batch: "+t.key(data.SQL), 1, 0, 0)
		}
	}
}

func (t *sqlTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if b, ok := ctx.Value(traceKey{}).(*batchTrace); ok {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.n > 0 {
			t.add("batch: "+b.first, 1, 1, time.Since(b.start))
		}
	}
}

// stats lists the kinds, most round trips first.
func (t *sqlTracer) stats() []sqlStat {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]sqlStat, 0, len(t.kinds))
	for _, s := range t.kinds {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].RoundTrips != out[j].RoundTrips {
			return out[i].RoundTrips > out[j].RoundTrips
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// sessionCPU reads, per role, the CPU seconds of every server process
// whose application_name is the role's (PostgreSQL on this machine).
func sessionCPU(ctx context.Context, pool *pgxpool.Pool, roles map[string]string) map[string]map[int]float64 {
	out := map[string]map[int]float64{}
	for role, app := range roles {
		out[role] = map[int]float64{}
		rows, err := pool.Query(untraced(ctx), `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
		if err != nil {
			continue
		}
		pids, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
		for _, pid := range pids {
			if c := procCPU(int(pid)); c >= 0 {
				out[role][int(pid)] = c
			}
		}
	}
	return out
}

// cpuUsed is each role's CPU seconds between two sessionCPU readings; a
// session that started in between counts from zero.
func cpuUsed(before, after map[string]map[int]float64) map[string]float64 {
	used := map[string]float64{}
	for role, pids := range after {
		for pid, c := range pids {
			used[role] += c - before[role][pid]
		}
	}
	return used
}
