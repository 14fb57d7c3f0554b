// Package testkit is what the project's tests share to wait: Eventually,
// for a condition the test can read, and Signal, for an engine step it
// cannot. A test that sleeps guesses how long a step takes and is slow or
// flaky on a loaded machine; these wait exactly as long as the step takes.
//
// Signal is river's pattern: the engine sends on a Signal at a step a test
// waits for, and the send does nothing unless a test called Init first.
// Production never does, so a send costs a nil check.
package testkit

import (
	"time"
)

// T is the part of testing.TB these helpers use; the engine imports this
// package, and production code must not import testing.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually calls cond until it returns true, and fails t, naming what it
// waited for, if d passes first. It polls every millisecond at first, then
// backs off to every 50 ms.
func Eventually(t T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, maxPoll) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(wait)
	}
}

const maxPoll = 50 * time.Millisecond

// WithDetail returns t for Eventually or Signal.Wait whose failure also
// says detail(): what the test saw last (a count, a status, the logs), so
// that a timeout says more than what was waited for. detail runs only on
// failure.
func WithDetail(t T, detail func() string) T { return detailT{t, detail} }

// detailT embeds T so that its Helper is t's own: the failure is reported
// at the test's line, not in this package.
type detailT struct {
	T
	detail func() string
}

func (d detailT) Fatalf(format string, args ...any) {
	d.T.Helper()
	d.T.Fatalf(format+"; %s", append(args, d.detail())...)
}

// signalBuffer is how many sends a Signal keeps until a test reads them;
// the sends past it are dropped, so a step never waits for a test.
const signalBuffer = 1000

// Signal carries the values of one engine step to a test that waits for
// it. The zero Signal is off: Send does nothing.
type Signal[V any] struct {
	name string
	ch   chan V
}

// Init turns the signal on, naming the step for Wait's failure. Call it
// before the engine runs: Send reads the channel without a lock.
func (s *Signal[V]) Init(name string) {
	s.name, s.ch = name, make(chan V, signalBuffer)
}

// Send reports the step; it never blocks.
func (s *Signal[V]) Send(v V) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Wait returns the oldest value sent and not yet read, waiting up to d;
// it fails t if none comes.
func (s *Signal[V]) Wait(t T, d time.Duration) V {
	t.Helper()
	if s.ch == nil {
		t.Fatalf("testkit: signal waited for without Init")
	}
	select {
	case v := <-s.ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for the engine step %q", d, s.name)
	}
	var zero V
	return zero
}

// WaitN waits for n sends, each within d, and returns their values.
func (s *Signal[V]) WaitN(t T, n int, d time.Duration) []V {
	t.Helper()
	vs := make([]V, 0, n)
	for range n {
		vs = append(vs, s.Wait(t, d))
	}
	return vs
}

// Drain drops the values sent so far, so that the next Wait sees a step
// that starts after it.
func (s *Signal[V]) Drain() {
	for {
		select {
		case <-s.ch:
		default:
			return
		}
	}
}
