package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// pinner keeps a write phase's two sides on separate CPUs (--pin-relay):
// the writers (this process and their PostgreSQL sessions) on the first
// CPU, the relay (its process, its sessions and its walsender) on the
// others, so the relay does not take the writers' CPU time. Sessions are
// told apart by their application_name; PostgreSQL's background processes
// are left where they are. The control phase (burnCommand) tells what a
// busy second CPU alone costs the writers on the machine.
type pinner struct {
	h          *harness
	apps       map[string]*unix.CPUSet // application_name: where its sessions go
	relayPID   int
	writers    unix.CPUSet
	relay      unix.CPUSet
	all        unix.CPUSet
	mu         sync.Mutex
	touched    map[int]bool // backends pinned, reset at stop
	stopped    chan struct{}
	loopDone   chan struct{}
	firstError error
}

// pinTick is how often new sessions and threads are pinned.
const pinTick = 100 * time.Millisecond

// cpuSets splits the CPUs this process may use: the first for the writers,
// the rest for the relay.
func cpuSets() (writers, relay, all unix.CPUSet, err error) {
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return writers, relay, all, fmt.Errorf("--pin-relay: read this process's CPUs: %w", err)
	}
	first := -1
	for c := 0; c < 1024; c++ {
		if !all.IsSet(c) {
			continue
		}
		if first < 0 {
			first = c
			writers.Set(c)
		} else {
			relay.Set(c)
		}
	}
	if relay.Count() == 0 {
		return writers, relay, all, errors.New("--pin-relay needs at least 2 CPUs")
	}
	return writers, relay, all, nil
}

// pinStart pins the phase's processes now and every pinTick until stop:
// this process's threads and the sessions named one of writerApps on the
// writers' CPU; relayPID's threads (0: no relay process) and the sessions
// named one of relayApps on the relay's CPUs.
func (h *harness) pinStart(ctx context.Context, writerApps, relayApps []string, relayPID int) (*pinner, error) {
	w, r, all, err := cpuSets()
	if err != nil {
		return nil, err
	}
	p := &pinner{h: h, apps: map[string]*unix.CPUSet{}, relayPID: relayPID, writers: w, relay: r, all: all,
		touched: map[int]bool{}, stopped: make(chan struct{}), loopDone: make(chan struct{})}
	for _, a := range writerApps {
		p.apps[a] = &p.writers
	}
	for _, a := range relayApps {
		if a != "" {
			p.apps[a] = &p.relay
		}
	}
	if err := p.apply(ctx); err != nil {
		p.reset()
		return nil, err
	}
	go p.loop(ctx)
	return p, nil
}

func (p *pinner) loop(ctx context.Context) {
	defer close(p.loopDone)
	t := time.NewTicker(pinTick)
	defer t.Stop()
	for {
		select {
		case <-p.stopped:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.apply(ctx); err != nil {
				p.mu.Lock()
				if p.firstError == nil {
					p.firstError = err
				}
				p.mu.Unlock()
			}
		}
	}
}

// apply pins what exists now.
func (p *pinner) apply(ctx context.Context) error {
	if err := pinThreads(os.Getpid(), &p.writers); err != nil {
		return fmt.Errorf("--pin-relay: pin this process: %w", err)
	}
	if p.relayPID > 0 {
		if err := pinThreads(p.relayPID, &p.relay); err != nil {
			return fmt.Errorf("--pin-relay: pin the relay process %d: %w", p.relayPID, err)
		}
	}
	names := make([]string, 0, len(p.apps))
	for a := range p.apps {
		names = append(names, a)
	}
	rows, err := p.h.pool.Query(ctx, `SELECT pid, application_name FROM pg_stat_activity WHERE application_name = ANY($1)`, names)
	if err != nil {
		return fmt.Errorf("--pin-relay: list sessions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var app string
		if err := rows.Scan(&pid, &app); err != nil {
			return err
		}
		if err := unix.SchedSetaffinity(pid, p.apps[app]); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			return fmt.Errorf("--pin-relay: pin PostgreSQL session %d (%s): %w (it needs PostgreSQL on this machine, and root or CAP_SYS_NICE)", pid, app, err)
		}
		p.mu.Lock()
		p.touched[pid] = true
		p.mu.Unlock()
	}
	return rows.Err()
}

// stop ends the pinning and gives every process it pinned that still runs
// all CPUs back. It returns the first error met after the start.
func (p *pinner) stop() error {
	close(p.stopped)
	<-p.loopDone
	p.reset()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstError
}

func (p *pinner) reset() {
	_ = pinThreads(os.Getpid(), &p.all)
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid := range p.touched {
		_ = unix.SchedSetaffinity(pid, &p.all)
	}
}

// pinThreads sets the CPUs of every thread of process pid (the affinity
// is a thread's; new threads inherit their creator's).
func pinThreads(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// burnCommand is the hidden subcommand of the --pin-relay control phase: a
// process that keeps one CPU busy and touches no database, pinned where
// the relay runs. What it costs the writers is what any work on the
// relay's CPUs costs them on this machine (shared caches, a hypervisor's
// siblings), the floor under a relay's figure.
const burnCommand = "__burn"

// burnMain spins until killed.
func burnMain() int {
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
		if x == 0 {
			return 0 // never: keeps the loop from being optimized away
		}
	}
}

// spawnBurner starts a burnCommand process.
func spawnBurner(ctx context.Context) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, burnCommand)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	return cmd, cmd.Start()
}
