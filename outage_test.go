package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/pgoutbox/outbox"
)

func TestNoAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("read: %w", io.EOF), true},
		{io.ErrUnexpectedEOF, true},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{net.ErrClosed, true},
		{os.ErrDeadlineExceeded, true}, // a net.Error whose Timeout is true
		{context.Canceled, false},      // the caller gave up, the destination said nothing
		{errors.New("413 payload too large"), false},
	} {
		if got := outbox.NoAnswer(tc.err); got != tc.want {
			t.Errorf("NoAnswer(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

func TestClassifyBatch(t *testing.T) {
	t.Parallel()
	eof := fmt.Errorf("post: %w", io.EOF)
	bad := outbox.Permanent(errors.New("too large"))
	refused := errors.New("503 from the endpoint")
	classes := func(errs []error) []string {
		out := make([]string, len(errs))
		for i, err := range errs {
			if err == nil {
				out[i] = "ok"
			} else {
				out[i] = outbox.Classify(err).String()
			}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		errs   []error
		outage func(error) bool
		want   []string
	}{
		{"nothing confirmed: no answer is an outage", []error{eof, eof}, nil, []string{"unavailable", "unavailable"}},
		{"one confirmed: failures stay the message's", []error{eof, nil}, nil, []string{"transient", "ok"}},
		{"nothing confirmed: a permanent failure stays permanent", []error{eof, bad}, nil, []string{"unavailable", "permanent"}},
		{"a permanent failure stays permanent whatever the predicate", []error{bad}, func(error) bool { return true }, []string{"permanent"}},
		{"the publisher's own predicate", []error{refused, refused}, func(err error) bool { return err == refused },
			[]string{"unavailable", "unavailable"}},
		{"an answer is not an outage by default", []error{refused}, nil, []string{"transient"}},
		{"empty batch", nil, nil, []string{}},
	} {
		errs := append([]error(nil), tc.errs...)
		got := classes(outbox.ClassifyBatch(errs, tc.outage))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: classes %v, want %v", tc.name, got, tc.want)
		}
	}
	// The original error stays in the chain, for logs and errors.Is.
	errs := outbox.ClassifyBatch([]error{eof}, nil)
	if !errors.Is(errs[0], io.EOF) || errs[0].Error() != eof.Error() {
		t.Errorf("ClassifyBatch lost the cause: %v", errs[0])
	}
}
