package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/pgoutbox/outbox"
)

// latencyRun measures commit-to-confirmation latency once per variant.
func (h *harness) latencyRun(ctx context.Context, r *results) error {
	type variant struct{ label, design, pub string }
	vs := []variant{
		{"pgoutbox → NATS JetStream (relay process, LISTEN + Notifier)", designOurs, pubNATS},
		{"baseline → NATS JetStream (trigger + LISTEN)", designBaseline, pubNATS},
	}
	if h.opt.LatMemory {
		vs = append(vs,
			variant{"pgoutbox → in-memory (relay process, LISTEN + Notifier)", designOurs, pubMemory},
			variant{"baseline → in-memory (trigger + LISTEN)", designBaseline, pubMemory})
	}
	for _, v := range vs {
		if err := h.latencyOnce(ctx, r, v.label, v.design, v.pub); err != nil {
			return fmt.Errorf("%s: %w", v.label, err)
		}
	}
	return nil
}

func (h *harness) latencyOnce(ctx context.Context, r *results, label, design, pub string) error {
	var s string
	var err error
	if design == designOurs {
		s, err = h.setupOurs(ctx, "latency")
	} else {
		s, err = h.setupBaseline(ctx, "latency", true)
	}
	if err != nil {
		return err
	}
	defer h.release(ctx, s)
	pool, db, err := h.writerDB(ctx, s)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer db.Close()

	spec := h.spec(design, s, pub)
	spec.Listen = true
	spec.Timed = true
	if pub == pubNATS {
		stream, err := h.newStream(ctx)
		if err != nil {
			return err
		}
		defer h.releaseStream(ctx, stream)
		spec.Subject = stream
	}
	child, err := spawnRelay(ctx, spec)
	if err != nil {
		return err
	}
	if err := child.start(); err != nil {
		child.kill()
		return err
	}
	w := writers{n: h.opt.LatWriters}
	if design == designOurs {
		ow, err := outbox.NewWriter(outbox.WriterConfig{Schema: s})
		if err != nil {
			child.kill()
			return err
		}
		n, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Schema: s})
		if err != nil {
			child.kill()
			return err
		}
		defer n.Close()
		w.create = func(ctx context.Context, o Order) error { return pgoutboxCreateOrder(ctx, db, ow, o) }
		w.after = n.Notify
	} else {
		w.create = func(ctx context.Context, o Order) error { return baselineCreateOrder(ctx, db, o) }
	}
	h.logf("latency: %s, %d ev/s for %s", label, h.opt.Rate, h.opt.LatWindow)
	st := w.paced(ctx, h.opt.Rate, h.opt.LatWindow)
	rows, err := h.rowCount(ctx, s, "outbox_events")
	if err != nil {
		child.kill()
		return err
	}
	res, err := child.finish(rows)
	f := r.lat(label)
	if err != nil {
		f.Notes = append(f.Notes, err.Error())
	}
	if st.Failed > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%d CreateOrder calls failed, first: %v", st.Failed, st.FirstErr))
	}
	var lat []float64
	for k, c := range st.CommitNs {
		if c == 0 || k >= len(res.Times) || res.Times[k] == 0 {
			continue
		}
		lat = append(lat, float64(res.Times[k]-c)/1e6)
	}
	sort.Float64s(lat)
	ok := err == nil && res.Delivery.OK() && int64(len(lat)) == st.Committed && rows == st.Committed
	f.OK = append(f.OK, ok)
	f.Dups = append(f.Dups, res.Delivery.Dups())
	f.Achieved = append(f.Achieved, float64(st.Committed)/st.Elapsed.Seconds())
	if len(lat) > 0 {
		f.P50 = append(f.P50, percentile(lat, 50))
		f.P99 = append(f.P99, percentile(lat, 99))
		f.Max = append(f.Max, lat[len(lat)-1])
	}
	f.CommitP50 = append(f.CommitP50, percentile(st.CallMS, 50))
	f.CommitP99 = append(f.CommitP99, percentile(st.CallMS, 99))
	h.logf("latency: %s: writers %.0f ev/s, p50 %.2f ms, p99 %.2f ms, max %.1f ms, delivered %d/%d, dups %d",
		label, f.Achieved[len(f.Achieved)-1], percentile(lat, 50), percentile(lat, 99), percentile(lat, 100),
		res.Delivery.Distinct, rows, res.Delivery.Dups())
	return nil
}
