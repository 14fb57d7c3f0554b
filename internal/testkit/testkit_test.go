package testkit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test, so that the failure
// paths can be checked.
type fakeT struct{ failed string }

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}

func failure(f func(t *fakeT)) (msg string) {
	t := &fakeT{}
	defer func() {
		if r := recover(); r != nil && r != any(t) {
			panic(r)
		}
		msg = t.failed
	}()
	f(t)
	return ""
}

func TestEventually(t *testing.T) {
	var n atomic.Int64
	Eventually(t, 5*time.Second, "three calls", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", n.Load())
	}
	msg := failure(func(ft *fakeT) { Eventually(ft, 20*time.Millisecond, "never", func() bool { return false }) })
	if msg != "timed out after 20ms waiting for never" {
		t.Fatalf("failure message %q", msg)
	}
	msg = failure(func(ft *fakeT) {
		Eventually(WithDetail(ft, func() string { return "2 rows" }), time.Millisecond, "three rows", func() bool { return false })
	})
	if msg != "timed out after 1ms waiting for three rows; 2 rows" {
		t.Fatalf("failure message with detail %q", msg)
	}
}

func TestSignal(t *testing.T) {
	var off Signal[int]
	off.Send(1) // off: does nothing, does not block

	var s Signal[int]
	s.Init("batch")
	for i := range signalBuffer + 5 {
		s.Send(i) // past the buffer: dropped, never blocks
	}
	if v := s.Wait(t, time.Second); v != 0 {
		t.Fatalf("Wait = %d, want the oldest (0)", v)
	}
	s.Drain()
	go s.Send(7)
	if vs := s.WaitN(t, 1, 5*time.Second); vs[0] != 7 {
		t.Fatalf("WaitN after Drain = %v, want [7]", vs)
	}
	msg := failure(func(ft *fakeT) { s.Wait(ft, 10*time.Millisecond) })
	if msg != `timed out after 10ms waiting for the engine step "batch"` {
		t.Fatalf("failure message %q", msg)
	}
	msg = failure(func(ft *fakeT) { off.Wait(ft, time.Millisecond) })
	if msg == "" {
		t.Fatal("Wait on a signal never initialised did not fail")
	}
}
