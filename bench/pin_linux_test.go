package main

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestPinner: --pin-relay puts the writers' sessions and this process on
// the first CPU, the relay's sessions on the others, and gives them all
// CPUs back at the end.
func TestPinner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := &harness{opt: options{DatabaseURL: testdb.URL()}}
	h.pool = testdb.Pool(t, "")
	writerApp, relayApp := testdb.NewSchemaName("pin_w"), testdb.NewSchemaName("pin_r")
	backend := func(app string) int {
		pool, err := newPool(ctx, testdb.URL(), "", app, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		var pid int
		if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	wpid, rpid := backend(writerApp), backend(relayApp)
	var probe unix.CPUSet
	if err := unix.SchedGetaffinity(wpid, &probe); err == nil {
		if err := unix.SchedSetaffinity(wpid, &probe); errors.Is(err, unix.EPERM) {
			t.Skip("setting a PostgreSQL backend's CPUs needs root or CAP_SYS_NICE")
		}
	}
	writers, relay, all, err := cpuSets()
	if err != nil {
		t.Skip(err) // one CPU: nothing to split
	}
	cpus := func(pid int) unix.CPUSet {
		var s unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	self := func() []unix.CPUSet {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		var out []unix.CPUSet
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			var s unix.CPUSet
			if unix.SchedGetaffinity(tid, &s) == nil {
				out = append(out, s)
			}
		}
		return out
	}

	p, err := h.pinStart(ctx, []string{writerApp}, []string{relayApp, ""}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := cpus(wpid); got != writers {
		t.Errorf("writers' session on %v, want %v", got, writers)
	}
	if got := cpus(rpid); got != relay {
		t.Errorf("relay's session on %v, want %v", got, relay)
	}
	for _, s := range self() {
		if s != writers {
			t.Errorf("a thread of this process on %v, want %v", s, writers)
		}
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if cpus(wpid) != all || cpus(rpid) != all {
		t.Errorf("after stop: writers' session on %v, relay's on %v, want %v", cpus(wpid), cpus(rpid), all)
	}
	for _, s := range self() {
		if s != all {
			t.Errorf("after stop: a thread of this process on %v, want %v", s, all)
		}
	}
}
