package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestOrderedRounds: an aggregate's run goes out one event per round, and
// stops at its first unconfirmed event; later events are not even tried.
func TestOrderedRounds(t *testing.T) {
	var (
		mu    sync.Mutex
		calls [][]string
	)
	fail := map[string]bool{"X2": true}
	e := &Engine{cfg: Config{Ordered: true, PublishTimeout: time.Second,
		Publish: func(_ context.Context, rows []*Row) []Attempt {
			mu.Lock()
			defer mu.Unlock()
			var call []string
			out := make([]Attempt, len(rows))
			for i, r := range rows {
				call = append(call, r.AggregateID+fmt.Sprint(r.Seq))
				if fail[r.AggregateID+fmt.Sprint(r.Seq)] {
					out[i].Err = errors.New("nack")
				}
			}
			calls = append(calls, call)
			return out
		}}}
	var batch []*Row
	for _, k := range []string{"X1", "Y1", "X2", "Y2", "X3", "Z1", "X4", "Y3"} {
		var seq int64
		fmt.Sscan(k[1:], &seq)
		r := &Row{Follower: seq > 1}
		r.AggregateType, r.AggregateID, r.Seq = "t", k[:1], seq
		batch = append(batch, r)
	}
	errs := errsOf(e.publishBatch(context.Background(), batch))
	want := "[[X1 Y1 Z1] [X2 Y2] [Y3]]"
	if got := fmt.Sprint(calls); got != want {
		t.Errorf("publish calls %s, want %s", got, want)
	}
	for i, r := range batch {
		k := r.AggregateID + fmt.Sprint(r.Seq)
		switch {
		case k == "X2":
			if errs[i] == nil || errors.Is(errs[i], errHeldBack) {
				t.Errorf("%s: %v, want its nack", k, errs[i])
			}
		case k == "X3" || k == "X4":
			if !errors.Is(errs[i], errHeldBack) {
				t.Errorf("%s: %v, want held back behind X2", k, errs[i])
			}
		default:
			if errs[i] != nil {
				t.Errorf("%s: %v, want published", k, errs[i])
			}
		}
	}
}

// TestOrderedRoundsDeadline: rounds share one PublishTimeout; what the
// deadline leaves untried is held back, never reported as published.
func TestOrderedRoundsDeadline(t *testing.T) {
	e := &Engine{cfg: Config{Ordered: true, PublishTimeout: 50 * time.Millisecond,
		Publish: func(ctx context.Context, rows []*Row) []Attempt {
			<-ctx.Done() // the first round uses up the whole timeout
			return failAll(len(rows), Attempt{Err: ctx.Err(), Timeout: true})
		}}}
	row := func(agg string, seq int64, follower bool) *Row {
		r := &Row{Follower: follower}
		r.AggregateID, r.Seq = agg, seq
		return r
	}
	batch := []*Row{row("X", 1, false), row("X", 2, true), row("Y", 3, false)}
	errs := errsOf(e.publishBatch(context.Background(), batch))
	if errs[0] == nil || errs[2] == nil || !errors.Is(errs[1], errHeldBack) {
		t.Fatalf("errs = %v; want X1 and Y3 timed out, X2 held back", errs)
	}
}

func errsOf(attempts []Attempt) []error {
	errs := make([]error, len(attempts))
	for i, a := range attempts {
		errs[i] = a.Err
	}
	return errs
}
