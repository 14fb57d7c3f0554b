package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// waitSampler samples, every few milliseconds, what a relay's database
// sessions are doing (pg_stat_activity: state and wait event), so the report
// can say where a batch's time goes: in PostgreSQL's CPU, waiting for the WAL
// flush of a commit, or "idle in transaction" while the relay process itself
// works (publishing, scanning rows).
type waitSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	counts map[string]int
	total  int
}

func (h *harness) sampleWaits(ctx context.Context, appName string) *waitSampler {
	ctx, cancel := context.WithCancel(ctx)
	ws := &waitSampler{cancel: cancel, done: make(chan struct{}), counts: map[string]int{}}
	go func() {
		defer close(ws.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := h.pool.Query(ctx, `SELECT state, COALESCE(wait_event_type || ':' || wait_event, 'CPU')
				FROM pg_stat_activity
				WHERE application_name = $1 AND state IS NOT NULL AND query NOT ILIKE 'LISTEN%'`, appName)
			if err != nil {
				continue
			}
			ws.mu.Lock()
			for rows.Next() {
				var state, wait string
				if rows.Scan(&state, &wait) != nil {
					continue
				}
				var key string
				switch state {
				case "idle":
					continue // a pooled connection no worker holds
				case "idle in transaction":
					key = "idle in transaction (relay process working: publish, scan, Go)"
				case "active":
					key = "active, " + wait
				default:
					key = state
				}
				ws.counts[key]++
				ws.total++
			}
			ws.mu.Unlock()
			rows.Close()
		}
	}()
	return ws
}

// sampleSessions samples every 10 ms what the sessions of each role (role →
// application_name) are doing while active: on CPU, or waiting (for a lock,
// the WAL flush, a buffer ...). Idle sessions are not counted.
func (h *harness) sampleSessions(ctx context.Context, sessions map[string]string) *waitSampler {
	ctx, cancel := context.WithCancel(ctx)
	ws := &waitSampler{cancel: cancel, done: make(chan struct{}), counts: map[string]int{}}
	roles := map[string]string{}
	var apps []string
	for role, app := range sessions {
		roles[app] = role
		apps = append(apps, app)
	}
	go func() {
		defer close(ws.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := h.pool.Query(ctx, `SELECT application_name, COALESCE(wait_event_type || ':' || wait_event, 'CPU')
				FROM pg_stat_activity
				WHERE application_name = ANY($1) AND state = 'active' AND query NOT ILIKE 'LISTEN%'`, apps)
			if err != nil {
				continue
			}
			ws.mu.Lock()
			for rows.Next() {
				var app, wait string
				if rows.Scan(&app, &wait) != nil {
					continue
				}
				ws.counts[roles[app]+" "+wait]++
				ws.total++
			}
			ws.mu.Unlock()
			rows.Close()
		}
	}()
	return ws
}

// stop ends sampling and returns "key share%" lines, largest first.
func (ws *waitSampler) stop() []string {
	ws.cancel()
	<-ws.done
	ws.mu.Lock()
	defer ws.mu.Unlock()
	type kv struct {
		k string
		n int
	}
	var kvs []kv
	for k, n := range ws.counts {
		kvs = append(kvs, kv{k, n})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].n > kvs[j].n })
	var out []string
	for _, e := range kvs {
		if share := float64(e.n) / float64(ws.total); share >= 0.01 {
			out = append(out, fmt.Sprintf("%s %.0f%%", e.k, 100*share))
		}
	}
	return out
}

func printWaits(w io.Writer, waits map[string][]string, order []string) {
	if len(order) == 0 {
		return
	}
	fmt.Fprintf(w, "### Where the relay's database sessions spend a batch (pg_stat_activity sampled every 5 ms, first run)\n\n")
	fmt.Fprintf(w, "| relay → publisher | share of busy session time |\n|---|---|\n")
	for _, label := range order {
		fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(waits[label], "; "))
	}
	fmt.Fprintln(w)
}
