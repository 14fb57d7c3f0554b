// Command watermill is the bench's peer: Watermill's SQL forwarder
// (watermill-sql v4 with its default PostgreSQL schema and offsets adapter,
// components/forwarder), tuned to a 10 ms poll and batches of 1000, relaying
// the events the bench's writers put in its table to an in-memory publisher
// that counts them. It is a module of its own so that Watermill never enters
// pgoutbox's go.mod; the bench builds it once and runs it as a process, as
// it runs pgoutbox's relay, over the same protocol on stdin/stdout:
//
//	peer → "ready"      schema created (watermill_outbox and its offsets table)
//	bench → "go"        start the forwarder (and the clock)
//	peer → "running"    the forwarder's router runs
//	bench → "stop N"    serve mode: wait until N distinct events arrived, stop
//	peer → {result}     one JSON line (the bench's relayResult), then exit
//
// With "init" set it exits after "ready": the bench's writers then have a
// table to write to with no forwarder reading it. The one argument is the
// bench's relay spec as JSON; the fields read are below.
//
// The bench's writers insert into watermill_outbox what
// forwarder.NewPublisher over sql.NewPublisher would insert inside their
// transaction: an envelope naming the destination topic, whose message
// carries the event's index as metadata "aggregate_id".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Topic is the forwarder's topic: its table is "watermill_outbox" on the
// spec's schema (the search_path).
const Topic = "outbox"

// PollDefault and BatchDefault are the forwarder's tuning unless the spec
// says otherwise: Watermill's defaults are 1 s and 100.
const (
	PollDefault  = 10 * time.Millisecond
	BatchDefault = 1000
)

// spec is the part of the bench's relaySpec the peer reads.
type spec struct {
	DatabaseURL string        `json:"database_url"`
	Schema      string        `json:"schema"`
	Expect      int           `json:"expect,omitempty"`
	Timed       bool          `json:"timed,omitempty"`
	BatchSize   int           `json:"batch_size,omitempty"`
	Poll        time.Duration `json:"poll,omitempty"`
	AppName     string        `json:"app_name"`
	Timeout     time.Duration `json:"timeout"`
	Profile     string        `json:"profile,omitempty"`
	Init        bool          `json:"init,omitempty"`
}

// result mirrors the bench's relayResult (the fields the peer fills).
type result struct {
	Elapsed  time.Duration `json:"elapsed"`
	DoneAt   int64         `json:"done_at"`
	Delivery delivery      `json:"delivery"`
	MaxRSSKB int64         `json:"max_rss_kb"`
	UserCPU  float64       `json:"user_cpu_s"`
	SysCPU   float64       `json:"sys_cpu_s"`
	Times    []int64       `json:"times,omitempty"`
	Handed   []int64       `json:"handed,omitempty"`
	Err      string        `json:"err,omitempty"`
}

type delivery struct {
	Expected int64 `json:"expected"`
	Distinct int64 `json:"distinct"`
	Total    int64 `json:"total"`
	Bad      int64 `json:"bad"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "watermill peer: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("want one JSON argument")
	}
	var sp spec
	if err := json.Unmarshal([]byte(args[0]), &sp); err != nil {
		return err
	}
	if sp.Poll <= 0 {
		sp.Poll = PollDefault
	}
	if sp.BatchSize <= 0 {
		sp.BatchSize = BatchDefault
	}
	if sp.Timeout <= 0 {
		sp.Timeout = 10 * time.Minute
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(sp.DatabaseURL)
	if err != nil {
		return err
	}
	if sp.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = sp.Schema
	}
	if sp.AppName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = sp.AppName
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	// Warnings and errors only, and none once the bench stopped the
	// forwarder (its subscriber logs the cancelled poll as an error).
	var stopped atomic.Bool
	logger := watermill.NewSlogLogger(slog.New(quietAfter{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), &stopped}))
	db := wsql.BeginnerFromPgx(pool)
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		ConsumerGroup:  "forwarder",
		PollInterval:   sp.Poll,
		SchemaAdapter:  wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: sp.BatchSize},
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
	}, logger)
	if err != nil {
		return err
	}
	if err := sub.SubscribeInitialize(Topic); err != nil {
		return fmt.Errorf("initialize the schema: %w", err)
	}
	fmt.Fprintln(stdout, "ready")
	if sp.Init {
		return nil
	}
	in := bufio.NewReader(stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("expected go, got %q (%v)", line, err)
	}
	if sp.Profile != "" {
		f, err := os.Create(sp.Profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	counter := newCounter(sp.Expect, sp.Timed)
	fwd, err := forwarder.NewForwarder(sub, counter, logger, forwarder.Config{ForwarderTopic: Topic, CloseTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- fwd.Run(rctx) }()
	select {
	case <-fwd.Running():
	case err := <-done:
		return fmt.Errorf("forwarder ended before running: %v", err)
	}
	fmt.Fprintln(stdout, "running")

	expect := int64(sp.Expect)
	if expect == 0 { // serve mode
		line, err := in.ReadString('\n')
		if err != nil {
			return err
		}
		if expect, err = parseStop(line); err != nil {
			return err
		}
	}
	counter.setTarget(expect)
	wctx, cancel := context.WithTimeout(ctx, sp.Timeout)
	doneAt := counter.wait(wctx)
	cancel()
	res := result{}
	if doneAt.IsZero() {
		d := counter.delivery(expect)
		res.Err = fmt.Sprintf("only %d of %d events confirmed within %s", d.Distinct, expect, sp.Timeout)
	} else {
		res.Elapsed = doneAt.Sub(start)
		res.DoneAt = doneAt.UnixNano()
		// Let the batch in flight store its offset before stopping: the
		// bench checks that no row is left past it.
		caughtUp(ctx, pool, 10*time.Second)
	}
	stopped.Store(true)
	if err := fwd.Close(); err != nil && res.Err == "" {
		res.Err = err.Error()
	}
	<-done
	res.Delivery = counter.delivery(expect)
	if sp.Timed {
		res.Times, res.Handed = counter.times, counter.times
	}
	res.MaxRSSKB = vmHWM()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.UserCPU = tv(ru.Utime)
		res.SysCPU = tv(ru.Stime)
	}
	return json.NewEncoder(stdout).Encode(res)
}

// pendingSQL counts the rows past the forwarder's stored offset.
const pendingSQL = `SELECT count(*) FROM "watermill_outbox" m, "watermill_offsets_outbox" o
WHERE o.consumer_group = 'forwarder' AND (m.transaction_id > o.last_processed_transaction_id
  OR (m.transaction_id = o.last_processed_transaction_id AND m."offset" > o.offset_acked))`

// caughtUp waits until the forwarder's offset is past every row, or d
// passes.
func caughtUp(ctx context.Context, pool *pgxpool.Pool, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var n int64
		if err := pool.QueryRow(ctx, pendingSQL).Scan(&n); err != nil || n == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// quietAfter drops every record once stopped is set.
type quietAfter struct {
	slog.Handler
	stopped *atomic.Bool
}

func (q quietAfter) Enabled(ctx context.Context, l slog.Level) bool {
	return !q.stopped.Load() && q.Handler.Enabled(ctx, l)
}

func (q quietAfter) WithAttrs(as []slog.Attr) slog.Handler {
	return quietAfter{q.Handler.WithAttrs(as), q.stopped}
}

func (q quietAfter) WithGroup(name string) slog.Handler {
	return quietAfter{q.Handler.WithGroup(name), q.stopped}
}

// parseStop reads the bench's "stop N".
func parseStop(line string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "stop "), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("expected stop N, got %q", line)
	}
	return n, nil
}

// counter is the in-memory publisher the forwarder publishes to: it
// confirms at once and checks each event's index off a bitset, as the
// bench's recorder does.
type counter struct {
	mu       sync.Mutex
	seen     []uint64
	total    int64
	distinct int64
	bad      int64
	target   int64
	doneAt   time.Time
	timed    bool
	times    []int64
}

var _ message.Publisher = (*counter)(nil)

func newCounter(expect int, timed bool) *counter {
	c := &counter{seen: make([]uint64, expect/64+1), timed: timed, target: int64(expect)}
	if timed {
		c.times = make([]int64, expect)
	}
	return c
}

func (c *counter) Publish(_ string, msgs ...*message.Message) error {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		c.total++
		i, err := strconv.Atoi(m.Metadata.Get("aggregate_id"))
		if err != nil || i < 0 {
			c.bad++
			continue
		}
		for i/64 >= len(c.seen) {
			c.seen = append(c.seen, make([]uint64, len(c.seen)+1)...)
		}
		w, b := i/64, uint64(1)<<(i%64)
		if c.seen[w]&b != 0 {
			continue
		}
		c.seen[w] |= b
		c.distinct++
		if c.timed {
			for i >= len(c.times) {
				c.times = append(c.times, make([]int64, len(c.times)+1)...)
			}
			c.times[i] = now.UnixNano()
		}
		if c.distinct == c.target {
			c.doneAt = now
		}
	}
	return nil
}

func (c *counter) Close() error { return nil }

func (c *counter) setTarget(n int64) {
	c.mu.Lock()
	c.target = n
	if c.distinct >= n && c.doneAt.IsZero() {
		c.doneAt = time.Now()
	}
	c.mu.Unlock()
}

func (c *counter) wait(ctx context.Context) time.Time {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		at := c.doneAt
		c.mu.Unlock()
		if !at.IsZero() {
			return at
		}
		select {
		case <-ctx.Done():
			return time.Time{}
		case <-t.C:
		}
	}
}

func (c *counter) delivery(expected int64) delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return delivery{Expected: expected, Distinct: c.distinct, Total: c.total, Bad: c.bad}
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// vmHWM is this process's peak resident set size in kB (Linux).
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
