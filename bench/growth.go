package main

import (
	"context"
	"fmt"
)

// growthTables are the large tables of the growth figure, filled once per
// invocation and reused by every run.
type growthTables struct {
	retained map[string]string // design → schema with GrowthRows processed rows
	backlog  map[string]string // design → schema with Events pending rows
	next     map[string]int    // design → next event index in the retained table
}

// fillRetained adds n already-processed rows, as a relay plus VACUUM would
// leave them. For the baseline's table (random UUIDv4 primary key) the key is
// built after the load, which gives the same table far sooner than 10M random
// index insertions; pgoutbox's keys are time-ordered, so its indexes are
// appended to in order either way.
func (h *harness) fillRetained(ctx context.Context, design, schema string, n int) error {
	processed := `, now() - interval '1 hour' + i * interval '1 microsecond' + interval '1 second'`
	var err error
	if design == designOurs {
		_, err = h.exec(ctx, schema, `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, processed_at)
SELECT `+v7ID+`, `+eventValuesSQL+processed+` FROM generate_series($1::bigint, $2::bigint) i`, -n, -1)
	} else {
		_, err = h.exec(ctx, schema, `ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_pkey;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at, processed_at)
SELECT `+eventValuesSQL+processed+` FROM generate_series(-`+fmt.Sprint(n)+`::bigint, -1) i;
ALTER TABLE outbox_events ADD PRIMARY KEY (id);`)
	}
	if err != nil {
		return err
	}
	return h.vacuum(ctx, schema)
}

func (h *harness) growthSetup(ctx context.Context) (*growthTables, error) {
	g := &growthTables{retained: map[string]string{}, backlog: map[string]string{}, next: map[string]int{}}
	for _, d := range []string{designOurs, designBaseline} {
		var s string
		var err error
		if d == designOurs {
			s, err = h.setupOurs(ctx, "retained")
		} else {
			s, err = h.setupBaseline(ctx, "retained", false)
		}
		if err != nil {
			return nil, err
		}
		h.logf("growth: %s: filling %d processed rows", d, h.opt.GrowthRows)
		if err := h.fillRetained(ctx, d, s, h.opt.GrowthRows); err != nil {
			return nil, err
		}
		if d == designBaseline {
			if _, err := h.exec(ctx, s, fmt.Sprintf(baselineTriggerSQL, baselineChannel(s))); err != nil {
				return nil, err
			}
		}
		g.retained[d] = s

		if d == designOurs {
			s, err = h.setupOurs(ctx, "backlog")
			if err == nil {
				h.logf("growth: %s: filling %d pending rows", d, h.opt.Events)
				err = h.fillOurs(ctx, s, 0, h.opt.Events)
			}
		} else {
			s, err = h.setupBaseline(ctx, "backlog", false)
			if err == nil {
				h.logf("growth: %s: filling %d pending rows", d, h.opt.Events)
				err = h.fillBaseline(ctx, s, 0, h.opt.Events)
			}
		}
		if err != nil {
			return nil, err
		}
		g.backlog[d] = s
	}
	return g, nil
}

// growthRun measures, for each design: the claim and the drain of
// GrowthBatch pending rows in an empty table and in the table retaining
// GrowthRows processed rows, and the claim with Events pending.
func (h *harness) growthRun(ctx context.Context, r *results, g *growthTables, first bool) error {
	p := h.opt.GrowthBatch
	for _, d := range []string{designOurs, designBaseline} {
		// Empty table.
		var s string
		var err error
		if d == designOurs {
			s, err = h.setupOurs(ctx, "empty")
		} else {
			s, err = h.setupBaseline(ctx, "empty", true)
		}
		if err != nil {
			return err
		}
		emptyLabel := fmt.Sprintf("%s: %s pending, no processed rows", d, count(p))
		emptyClaim, emptyRate, err := h.growthOne(ctx, r, d, s, 0, emptyLabel)
		if err != nil {
			return err
		}
		h.release(ctx, s)
		ef := r.growth(emptyLabel)
		ef.ClaimRatio = append(ef.ClaimRatio, 1)
		ef.RateRatio = append(ef.RateRatio, 1)

		// Retained processed rows.
		s = g.retained[d]
		label := fmt.Sprintf("%s: %s pending, %s processed rows retained", d, count(p), count(h.opt.GrowthRows))
		claim, rate, err := h.growthOne(ctx, r, d, s, g.next[d], label)
		if err != nil {
			return err
		}
		g.next[d] += p
		f := r.growth(label)
		f.ClaimRatio = append(f.ClaimRatio, claim/emptyClaim)
		if emptyRate > 0 && rate > 0 {
			f.RateRatio = append(f.RateRatio, rate/emptyRate)
		}
		if first && d == designOurs {
			// EXPLAIN with the batch pending again (rolled back): what the
			// relay's claim reads in a table retaining millions of rows.
			if err := h.fillOurs(ctx, s, g.next[d], p); err != nil {
				return err
			}
			g.next[d] += p
			plan, err := h.explainClaim(ctx, d, s)
			if err != nil {
				return err
			}
			r.explains = append(r.explains, fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS) of pgoutbox's claim, %s pending, %s processed rows retained:\n\n```\n%s\n```",
				count(p), count(h.opt.GrowthRows), plan))
			if _, err := h.exec(ctx, s, "UPDATE outbox_events SET processed_at = now() WHERE processed_at IS NULL"); err != nil {
				return err
			}
		}
		// Stand in for autovacuum between runs, so each run starts from the
		// same steady state.
		if err := h.vacuum(ctx, s); err != nil {
			return err
		}

		// A large backlog: the claim must not depend on its size.
		bl := fmt.Sprintf("%s: %s pending, no processed rows", d, count(h.opt.Events))
		st, err := h.claimLatency(ctx, d, g.backlog[d], h.opt.ClaimSamples)
		if err != nil {
			return err
		}
		bf := r.growth(bl)
		bf.addClaim(st)
		bf.ClaimRatio = append(bf.ClaimRatio, st.P50/emptyClaim)
		h.logf("growth: %s: claim p50 %.2f ms p99 %.2f ms", bl, st.P50, st.P99)
	}
	return nil
}

// growthOne fills p pending rows from index `from`, times the claim, then
// drains them with the design's relay (in-memory publisher).
func (h *harness) growthOne(ctx context.Context, r *results, design, s string, from int, label string) (claimP50, rate float64, err error) {
	p := h.opt.GrowthBatch
	f := r.growth(label)
	var fillAfter func() error
	if design == designOurs {
		if err := h.fillOurs(ctx, s, from, p); err != nil {
			return 0, 0, err
		}
		st, err := h.claimLatency(ctx, design, s, h.opt.ClaimSamples)
		if err != nil {
			return 0, 0, err
		}
		f.addClaim(st)
		claimP50 = st.P50
	} else {
		// The claim is timed on the same table state, with the trigger off
		// (the baseline's relay only drains what it is notified of).
		if _, err := h.exec(ctx, s, "ALTER TABLE outbox_events DISABLE TRIGGER outbox_insert_notify"); err != nil {
			return 0, 0, err
		}
		if err := h.fillBaseline(ctx, s, from, p); err != nil {
			return 0, 0, err
		}
		st, err := h.claimLatency(ctx, design, s, h.opt.ClaimSamples)
		if err != nil {
			return 0, 0, err
		}
		f.addClaim(st)
		claimP50 = st.P50
		// Then the drain: the rows just timed are marked processed (VACUUM
		// clears them from the partial index), and a fresh batch is written
		// through the trigger once the relay listens.
		if _, err := h.exec(ctx, s, "UPDATE outbox_events SET processed_at = now() WHERE processed_at IS NULL; ALTER TABLE outbox_events ENABLE TRIGGER outbox_insert_notify"); err != nil {
			return 0, 0, err
		}
		if err := h.vacuum(ctx, s); err != nil {
			return 0, 0, err
		}
		from += p
		fillAfter = func() error { return h.fillBaseline(ctx, s, from, p) }
	}
	spec := h.spec(design, s, pubMemory)
	h.logf("growth: %s: draining", label)
	res, rate, err := h.drainOnce(ctx, spec, s, p, fillAfter)
	ok := err == nil && res.Delivery.OK()
	if err != nil {
		f.Notes = append(f.Notes, err.Error())
	}
	f.Rate = append(f.Rate, rate)
	f.OK = append(f.OK, ok)
	h.logf("growth: %s: claim p50 %.2f ms, drain %.0f ev/s, delivered %d/%d, dups %d", label, claimP50, rate,
		res.Delivery.Distinct, p, res.Delivery.Dups())
	return claimP50, rate, nil
}
