package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/pgoutbox/outbox"
)

// recorder is the delivery check every figure depends on. Each event the
// harness writes carries its index (0, 1, 2, ...) as aggregate_id; the
// recorder counts confirmations per index in a bitset, so checking 1M events
// costs 125 kB in the relay's process and does not distort its RSS.
type recorder struct {
	mu       sync.Mutex
	seen     []uint64 // bit i: index i confirmed at least once
	total    int64    // confirmations, duplicates included
	distinct int64
	bad      int64 // aggregate ids that are not an index (never expected)
	target   int64 // distinct count that sets doneAt
	doneAt   time.Time
	timed    bool
	times    []int64 // first confirmation (Unix ns) by index, when timed
	handed   []int64 // timed: when the relay first handed the event to the publisher (Unix ns)
}

func newRecorder(expect int, timed bool) *recorder {
	r := &recorder{seen: make([]uint64, expect/64+1), timed: timed, target: int64(expect)}
	if timed {
		r.times = make([]int64, expect)
		r.handed = make([]int64, expect)
	}
	return r
}

// hand stamps the moment the relay handed msgs to the publisher, so a
// latency splits into the relay's part (commit → handed) and the
// broker's (handed → confirmed).
func (r *recorder) hand(msgs ...*outbox.Message) {
	if !r.timed {
		return
	}
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		i, err := strconv.Atoi(m.AggregateID)
		if err != nil || i < 0 {
			continue
		}
		for i >= len(r.handed) {
			r.handed = append(r.handed, make([]int64, len(r.handed)+1)...)
		}
		if r.handed[i] == 0 {
			r.handed[i] = now
		}
	}
}

// setTarget makes doneAt the time the n-th distinct event was confirmed.
func (r *recorder) setTarget(n int64) {
	r.mu.Lock()
	r.target = n
	if r.distinct >= n && r.doneAt.IsZero() {
		r.doneAt = time.Now()
	}
	r.mu.Unlock()
}

func (r *recorder) recordLocked(aggregateID string, at time.Time) {
	r.total++
	i, err := strconv.Atoi(aggregateID)
	if err != nil || i < 0 {
		r.bad++
		return
	}
	for i/64 >= len(r.seen) {
		r.seen = append(r.seen, make([]uint64, len(r.seen)+1)...)
	}
	w, b := i/64, uint64(1)<<(i%64)
	if r.seen[w]&b != 0 {
		return
	}
	r.seen[w] |= b
	r.distinct++
	if r.timed {
		for i >= len(r.times) {
			r.times = append(r.times, make([]int64, len(r.times)+1)...)
		}
		r.times[i] = at.UnixNano()
	}
	if r.distinct == r.target {
		r.doneAt = at
	}
}

func (r *recorder) record(aggregateID string) {
	now := time.Now()
	r.mu.Lock()
	r.recordLocked(aggregateID, now)
	r.mu.Unlock()
}

// wait polls until target distinct events were confirmed or ctx ends; it
// returns when the target was reached (zero on timeout). Polling adds nothing
// to the figure: doneAt is stamped by the confirmation itself.
func (r *recorder) wait(ctx context.Context) time.Time {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		r.mu.Lock()
		at := r.doneAt
		r.mu.Unlock()
		if !at.IsZero() {
			return at
		}
		select {
		case <-ctx.Done():
			return time.Time{}
		case <-t.C:
		}
	}
}

// delivery is the verdict of a recorder against what the table holds.
type delivery struct {
	Expected int64 `json:"expected"`
	Distinct int64 `json:"distinct"`
	Total    int64 `json:"total"`
	Bad      int64 `json:"bad"`
}

func (d delivery) Dups() int64 { return d.Total - d.Distinct - d.Bad }

// OK reports every expected event confirmed at least once and nothing foreign.
func (d delivery) OK() bool { return d.Distinct == d.Expected && d.Bad == 0 }

func (r *recorder) delivery(expected int64) delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return delivery{Expected: expected, Distinct: r.distinct, Total: r.total, Bad: r.bad}
}

// recordingPublisher confirms through next (nil: at once, the in-memory
// publisher of the drain figures) and records every confirmation.
type recordingPublisher struct {
	rec  *recorder
	next outbox.Publisher
}

var _ outbox.BatchPublisher = (*recordingPublisher)(nil)

func (p *recordingPublisher) Publish(ctx context.Context, m *outbox.Message) error {
	p.rec.hand(m)
	if p.next != nil {
		if err := p.next.Publish(ctx, m); err != nil {
			return err
		}
	} else if err := ctx.Err(); err != nil {
		return err
	}
	p.rec.record(m.AggregateID)
	return nil
}

func (p *recordingPublisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	p.rec.hand(msgs...)
	var errs []error
	switch next := p.next.(type) {
	case nil:
		if err := ctx.Err(); err != nil {
			errs = make([]error, len(msgs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
	case outbox.BatchPublisher:
		errs = next.PublishBatch(ctx, msgs)
	default:
		errs = make([]error, len(msgs))
		for i, m := range msgs {
			errs[i] = next.Publish(ctx, m)
		}
	}
	now := time.Now()
	p.rec.mu.Lock()
	for i, m := range msgs {
		if errs == nil || errs[i] == nil {
			p.rec.recordLocked(m.AggregateID, now)
		}
	}
	p.rec.mu.Unlock()
	return errs
}
