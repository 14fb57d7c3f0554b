package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// writeProbe reads, around a write phase's window, what the phase cost the
// database: WAL (pg_stat_wal; server-wide, so other work on the server
// counts too, though the writers' WAL dominates it), the relay's claims
// (scans of the ready index, which the writers only insert into) and, with
// --write-waits, what the writers' and the relay's sessions waited for; with
// --write-profile, a CPU profile of this process (the writers, and the relay
// when it runs in process).
type writeProbe struct {
	h       *harness
	schema  string
	walRecs int64
	walFPI  int64
	walB    float64
	lsn     string // pg_current_wal_lsn at the start
	scans   int64
	start   time.Time
	waits   *waitSampler
	profile *os.File
	apps    map[string]string // role → application_name
	cpu     map[int]float64   // backend pid → CPU seconds at the start
	relay   int               // the relay process's pid (a child relay), or 0
	relayT0 float64           // its CPU seconds at the start
}

// probeResult is a write phase's cost per committed order.
type probeResult struct {
	WALBytes, WALRecs, FPI float64 // per committed order
	WALLSNBytes            float64 // per committed order: pg_current_wal_lsn's advance (exact, server-wide)
	ClaimsPS, PerClaim     float64 // claims/s; committed orders per claim
	Waits                  []string
	BackendCPU             map[string]float64 // role → its PostgreSQL sessions' CPU µs per order
	RelayProcCPU           float64            // a child relay's own CPU µs per order; 0 in process
}

// probeStart starts probing a phase; sessions maps a role ("writers",
// "relay") to the application_name of its sessions; relay is the pid of a
// relay process of its own, or 0.
func (h *harness) probeStart(ctx context.Context, schema, label string, sessions map[string]string, relay int) *writeProbe {
	p := &writeProbe{h: h, schema: schema, apps: sessions, relay: relay}
	if relay > 0 {
		p.relayT0 = procCPU(relay)
	}
	p.cpu = map[int]float64{}
	for _, pids := range h.backends(ctx, sessions) {
		for _, pid := range pids {
			p.cpu[pid] = procCPU(pid)
		}
	}
	p.walRecs, p.walFPI, p.walB = h.walStats(ctx)
	_ = h.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&p.lsn)
	p.scans = h.pendingScans(ctx, schema)
	if h.opt.WriteWaits {
		p.waits = h.sampleSessions(ctx, sessions)
	}
	if h.opt.WriteProfile != "" {
		name := regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(label, "-")
		f, err := os.Create(filepath.Join(h.opt.WriteProfile, fmt.Sprintf("%03d-%s.pprof", h.seq, name)))
		if err != nil {
			h.logf("--write-profile: %v", err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			h.logf("--write-profile: %v", err)
		} else {
			p.profile = f
		}
	}
	p.start = time.Now()
	return p
}

// stop ends the probe of a window in which committed orders committed.
func (p *writeProbe) stop(ctx context.Context, committed int64) probeResult {
	el := time.Since(p.start)
	if p.profile != nil {
		pprof.StopCPUProfile()
		p.profile.Close()
	}
	var r probeResult
	if p.waits != nil {
		r.Waits = p.waits.stop()
	}
	recs, fpi, b := p.h.walStats(ctx)
	var lsnBytes float64
	if p.lsn != "" {
		_ = p.h.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8`, p.lsn).Scan(&lsnBytes)
	}
	if committed > 0 {
		r.WALLSNBytes = lsnBytes / float64(committed)
	}
	r.BackendCPU = map[string]float64{}
	for role, pids := range p.h.backends(ctx, p.apps) {
		for _, pid := range pids {
			if c := procCPU(pid); c >= 0 && committed > 0 {
				r.BackendCPU[role] += (c - max(p.cpu[pid], 0)) / float64(committed) * 1e6
			}
		}
	}
	if p.relay > 0 && committed > 0 {
		if c := procCPU(p.relay); c >= 0 {
			r.RelayProcCPU = (c - max(p.relayT0, 0)) / float64(committed) * 1e6
		}
	}
	// A busy session flushes its statistics at most once a second: wait
	// for the claims of the window to be counted (the relay keeps claiming
	// meanwhile, which counts them a little high).
	time.Sleep(1100 * time.Millisecond)
	scans := p.h.pendingScans(ctx, p.schema) - p.scans
	if committed > 0 {
		n := float64(committed)
		r.WALRecs, r.FPI, r.WALBytes = float64(recs-p.walRecs)/n, float64(fpi-p.walFPI)/n, (b-p.walB)/n
		if scans > 0 {
			r.PerClaim = n / float64(scans)
		}
	}
	r.ClaimsPS = float64(scans) / el.Seconds()
	return r
}

func (h *harness) walStats(ctx context.Context) (recs, fpi int64, bytes float64) {
	_ = h.pool.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::float8 FROM pg_stat_wal`).Scan(&recs, &fpi, &bytes)
	return recs, fpi, bytes
}

// pendingScans is how many index scans the indexes the claims read have had:
// one per claim.
func (h *harness) pendingScans(ctx context.Context, schema string) int64 {
	var n int64
	_ = h.pool.QueryRow(ctx, `SELECT COALESCE(sum(idx_scan), 0)::bigint FROM pg_stat_user_indexes
		WHERE schemaname = $1 AND indexrelname IN ('outbox_events_pending_idx', 'outbox_events_ready_idx', 'idx_outbox_unprocessed')`, schema).Scan(&n)
	return n
}

// backends lists the server process ids of each role's sessions.
func (h *harness) backends(ctx context.Context, sessions map[string]string) map[string][]int {
	out := map[string][]int{}
	for role, app := range sessions {
		rows, err := h.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
		if err != nil {
			continue
		}
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil {
				out[role] = append(out[role], pid)
			}
		}
		rows.Close()
	}
	return out
}

// procCPU is the CPU time (user + system, seconds) a local process has used,
// or -1 if unknown (the server is on another machine).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // clock ticks; USER_HZ is 100 on Linux
}
