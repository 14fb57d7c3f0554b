package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// pgBin is where Debian installs PostgreSQL 15's server binaries.
const pgBin = "/usr/lib/postgresql/15/bin"

// privateCluster is a PostgreSQL of the benchmark's own: on a shared
// server every walsender decodes the WAL of everyone's writes, so another
// workload would change the stream variants' cost.
type privateCluster struct {
	dir  string
	port int
	pid  int      // the postmaster's
	as   []string // runs a command as the postgres user when we are root
}

// startPrivate initdbs a cluster in a temporary directory with the shared
// server's durability settings (fsync, synchronous_commit on) and
// wal_level=logical, autovacuum on (waking every 5 s, so that a run of
// a few seconds pays for vacuuming what it deleted), and starts it on a
// free port.
func startPrivate(ctx context.Context) (*privateCluster, error) {
	dir, err := os.MkdirTemp("", "walcost-pg-")
	if err != nil {
		return nil, err
	}
	c := &privateCluster{dir: dir}
	if u, _ := user.Current(); u != nil && u.Uid == "0" {
		// initdb refuses to run as root.
		c.as = []string{"runuser", "-u", "postgres", "--"}
		if err := exec.CommandContext(ctx, "chown", "postgres", dir).Run(); err != nil {
			return nil, fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	data := filepath.Join(dir, "data")
	if out, err := c.cmd(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync").CombinedOutput(); err != nil {
		c.remove()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_wal_senders=10 -c max_replication_slots=10 -c shared_buffers=128MB -c max_connections=100 -c autovacuum_naptime=5s", c.port, dir)
	if out, err := c.cmd(ctx, "pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		c.remove()
		return nil, fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	pidFile, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		c.stop()
		return nil, err
	}
	c.pid, _ = strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	return c, nil
}

func (c *privateCluster) url() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.port) + "/postgres?sslmode=disable"
}

func (c *privateCluster) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, c.as...), filepath.Join(pgBin, name)), args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// stop stops the cluster and removes its directory.
func (c *privateCluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.cmd(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "stop").Run()
	c.remove()
}

func (c *privateCluster) remove() { _ = os.RemoveAll(c.dir) }
