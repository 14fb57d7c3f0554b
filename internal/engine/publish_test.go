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
		Publish: func(_ context.Context, rows []*Row) []error {
			mu.Lock()
			defer mu.Unlock()
			var call []string
			errs := make([]error, len(rows))
			for i, r := range rows {
				call = append(call, r.AggregateID+fmt.Sprint(r.Seq))
				if fail[r.AggregateID+fmt.Sprint(r.Seq)] {
					errs[i] = errors.New("nack")
				}
			}
			calls = append(calls, call)
			return errs
		}}}
	var batch []*Row
	for _, k := range []string{"X1", "Y1", "X2", "Y2", "X3", "Z1", "X4", "Y3"} {
		var seq int64
		fmt.Sscan(k[1:], &seq)
		batch = append(batch, &Row{AggregateType: "t", AggregateID: k[:1], Seq: seq, Follower: seq > 1})
	}
	errs := e.publishBatch(context.Background(), batch)
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
		Publish: func(ctx context.Context, rows []*Row) []error {
			<-ctx.Done() // the first round uses up the whole timeout
			errs := make([]error, len(rows))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}}}
	batch := []*Row{{AggregateID: "X", Seq: 1}, {AggregateID: "X", Seq: 2, Follower: true}, {AggregateID: "Y", Seq: 3}}
	errs := e.publishBatch(context.Background(), batch)
	if errs[0] == nil || errs[2] == nil || !errors.Is(errs[1], errHeldBack) {
		t.Fatalf("errs = %v; want X1 and Y3 timed out, X2 held back", errs)
	}
}
