package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times on Linux.
const clockTicks = 100

// serverCPU is the CPU time the private cluster has used so far: its live
// processes' own, plus what the postmaster collected from its exited
// children (backends, autovacuum workers). Unlike throughput on a shared
// machine, CPU time per order hardly depends on what else runs.
func serverCPU(postmaster int) (time.Duration, error) {
	if postmaster == 0 {
		return 0, nil
	}
	f, err := procStat(postmaster)
	if err != nil {
		return 0, err
	}
	total := ticks(f, 13) + ticks(f, 14) + ticks(f, 15) + ticks(f, 16) // utime stime cutime cstime
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		f, err := procStat(pid)
		if err != nil || f[3] != strconv.Itoa(postmaster) { // ppid
			continue
		}
		total += ticks(f, 13) + ticks(f, 14)
	}
	return time.Duration(total) * time.Second / clockTicks, nil
}

// selfCPU is this process's CPU time: the writers' client side and the
// stream consumer.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStat returns the fields of /proc/pid/stat, numbered as in proc(5)
// minus one (the command, which may hold spaces, is skipped over).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	// fields[0] is pid, [1] the command; the rest follow the ')'.
	return append([]string{strconv.Itoa(pid), ""}, strings.Fields(s[i+1:])...), nil
}

func ticks(f []string, i int) int64 {
	if i >= len(f) {
		return 0
	}
	n, _ := strconv.ParseInt(f[i], 10, 64)
	return n
}
