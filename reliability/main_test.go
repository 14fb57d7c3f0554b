package reliability

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/testdb"
)

var (
	flagLong       = flag.Bool("reliability.long", os.Getenv("OUTBOX_RELIABILITY_LONG") == "1", "run the long version: minutes of outage, millions of rows, a real PostgreSQL restart (also OUTBOX_RELIABILITY_LONG=1)")
	flagReport     = flag.String("reliability.report", "", "write the results as markdown to this file; a relative path is taken from the repository root (RELIABILITY.md)")
	flagRaceRelay  = flag.Bool("reliability.racerelay", false, "build the relay binary with -race; a data race in a relay fails the test")
	flagKeepLogs   = flag.Bool("reliability.keeplogs", false, "print every relay's log at the end of its test")
	flagParallel   = flag.Int("reliability.parallel", 0, "how many scenarios run at once (default 5; the long version 2)")
	outboxBin      string // the outbox binary, built once
	flakyRelayBin  string // reliability/internal/flakyrelay: a relay whose publisher fails on purpose
	natsServerBin  string // the nats-server binary, "" to use an embedded server
	report         = &collector{}
	suiteStartedAt = time.Now()
)

// collector gathers the rows and checks of every test for the report.
type collector struct {
	mu     sync.Mutex
	rows   []Row
	checks []Assertion
}

func (c *collector) row(r Row) {
	c.mu.Lock()
	c.rows = append(c.rows, r)
	c.mu.Unlock()
}

func (c *collector) check(a Assertion) {
	status := "pass"
	if !a.Passed {
		status = "FAIL"
	}
	fmt.Printf("    check [%s] %s: %s\n        observed: %s\n", status, a.Area, a.Name, a.Observed)
	c.mu.Lock()
	c.checks = append(c.checks, a)
	c.mu.Unlock()
}

// scenarioSlots bounds how many scenarios run at once: each runs relays,
// nats-servers and writers, and the machine has 2 cores shared with other
// packages' tests.
var scenarioSlots chan struct{}

// slot takes a scenario slot until the test ends.
func slot(t *testing.T) {
	t.Helper()
	scenarioSlots <- struct{}{}
	t.Cleanup(func() { <-scenarioSlots })
}

func TestMain(m *testing.M) {
	flag.Parse()
	n := *flagParallel
	if n <= 0 {
		n = 5
		if *flagLong {
			n = 2
		}
	}
	scenarioSlots = make(chan struct{}, n)
	// The scenario slots, not -parallel, bound the heavy tests; the light
	// ones and the tests waiting for a slot need not hold a -parallel slot.
	// (Most of a scenario's time is spent waiting for faults to play out.)
	if f := flag.Lookup("test.parallel"); f != nil && f.Value.String() == fmt.Sprint(runtime.GOMAXPROCS(0)) {
		_ = f.Value.Set("64")
	}

	dir, err := os.MkdirTemp("", "outbox-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	outboxBin = filepath.Join(dir, "outbox")
	flakyRelayBin = filepath.Join(dir, "flakyrelay")
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if *flagRaceRelay {
		args = append(args, "-race")
	}
	args = append(args, "github.com/pgoutbox/outbox/cmd/outbox", "github.com/pgoutbox/outbox/reliability/internal/flakyrelay")
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "reliability: building the outbox binary:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	natsServerBin = findNATSServer()

	code := m.Run()

	if *flagReport != "" {
		if err := writeReport(*flagReport); err != nil {
			fmt.Fprintln(os.Stderr, "reliability: writing the report:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func findNATSServer() string {
	if p := os.Getenv("NATS_SERVER_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

func writeReport(path string) error {
	report.mu.Lock()
	defer report.mu.Unlock()
	r := &Report{Key: "ci", Size: "CI size", Command: "go test ./reliability -count=1 -v -reliability.report RELIABILITY.md",
		Started: suiteStartedAt, Duration: time.Since(suiteStartedAt), Rows: report.rows, Checks: report.checks}
	if *flagLong {
		r.Key, r.Size = "long", "long version"
		r.Command = "go test ./reliability -count=1 -v -timeout 3h -reliability.long -reliability.report RELIABILITY.md"
	}
	host := fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			host += fmt.Sprintf(", %d GiB RAM", (kb+512*1024)>>20)
		}
	}
	host += ", " + runtime.Version()
	if natsServerBin != "" {
		if out, err := exec.Command(natsServerBin, "--version").Output(); err == nil {
			host += ", " + strings.TrimSpace(string(out))
		}
	} else {
		host += ", embedded nats-server"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, testdb.URL()); err == nil {
		var v string
		if conn.QueryRow(ctx, `SHOW server_version`).Scan(&v) == nil {
			host += ", PostgreSQL " + strings.Fields(v)[0]
		}
		conn.Close(ctx)
	}
	r.Machine = host
	if !filepath.IsAbs(path) {
		path = filepath.Join("..", path) // the test runs in reliability/
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, []byte(r.Merge(string(old))), 0o644)
}

// long picks the CI or the long value.
func long[T any](ci, lng T) T {
	if *flagLong {
		return lng
	}
	return ci
}

// missing ends a test that cannot run because a local service, binary or
// document it needs is missing: a skip on a developer's machine, a failure
// under CI (CI set to anything but "false" or "0"), so that a CI run never
// passes without the scenario.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("CI=%s: "+format, append([]any{ci}, args...)...)
		return
	}
	t.Skipf(format, args...)
}
