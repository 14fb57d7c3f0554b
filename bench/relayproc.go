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
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/kafka"
	outboxnats "github.com/pgoutbox/outbox/nats"
	"github.com/pgoutbox/outbox/rabbitmq"
	outboxredis "github.com/pgoutbox/outbox/redis"
	outboxsqs "github.com/pgoutbox/outbox/sqs"
	"github.com/pgoutbox/outbox/webhook"
)

// childCommand is the hidden subcommand that runs one relay in a process of
// its own, so that its peak RSS and CPU time are its own. The parent drives
// it over stdin/stdout:
//
//	child → "ready"      connected, relay built, nothing claimed yet
//	parent → "go"        start the relay (and the clock)
//	child → "running"    relay started (with LISTEN, listening; with the WAL
//	                     source, streaming its slot)
//	parent → "stop N"    serve mode: wait until N distinct events arrived, stop
//	child → {result}     one JSON line, then exit
//
// In drain mode (Expect > 0) the child stops by itself once Expect distinct
// events were confirmed.
const childCommand = "__relay"

// relaySpec says which relay to run and how.
type relaySpec struct {
	Design       string        `json:"design"` // designOurs or designBaseline
	DatabaseURL  string        `json:"database_url"`
	Schema       string        `json:"schema"`
	Publisher    string        `json:"publisher"` // pubMemory, pubNATS, pubKafka, ...
	NatsURL      string        `json:"nats_url,omitempty"`
	Subject      string        `json:"subject,omitempty"`    // NATS subject prefix
	BrokerURL    string        `json:"broker_url,omitempty"` // Kafka seed host:port, AMQP URL, Redis URL, SQS endpoint, pstest host:port or MQTT URL
	Target       string        `json:"target,omitempty"`     // Kafka topic, RabbitMQ queue, Redis stream, SQS queue URL, webhook URL template, Pub/Sub topic or MQTT topic
	Secret       string        `json:"secret,omitempty"`     // webhook signing secret
	Expect       int           `json:"expect,omitempty"`     // drain mode: events to wait for
	Timed        bool          `json:"timed,omitempty"`      // record confirmation times
	BatchSize    int           `json:"batch_size,omitempty"`
	Workers      int           `json:"workers,omitempty"`
	Listen       bool          `json:"listen,omitempty"`        // pgoutbox: RelayConfig.Listen
	Delete       bool          `json:"delete,omitempty"`        // pgoutbox: RelayConfig.DeleteOnPublish
	Source       string        `json:"source,omitempty"`        // pgoutbox: RelayConfig.Source ("" is the default, the table)
	BatchDelay   time.Duration `json:"batch_delay,omitempty"`   // pgoutbox: RelayConfig.BatchDelay
	RotateEvents int           `json:"rotate_events,omitempty"` // pgoutbox: RelayConfig.RotateEvents
	RotateEvery  time.Duration `json:"rotate_every,omitempty"`  // pgoutbox: RelayConfig.RotateInterval
	Rescan       time.Duration `json:"rescan,omitempty"`        // pgoutbox: RelayConfig.RescanInterval
	AsyncCommit  bool          `json:"async_commit,omitempty"`  // the relay's sessions run synchronous_commit=off
	BaselineMode string        `json:"baseline_mode,omitempty"` // baseline: "listen" or "poll"
	AppName      string        `json:"app_name"`
	Timeout      time.Duration `json:"timeout"`
	Profile      string        `json:"profile,omitempty"` // write a CPU profile of the relay, from go to stop, to this file
	// TraceSQL: count the relay's statements and round trips and time
	// them (a pgx tracer on its pool), and read the CPU its PostgreSQL
	// sessions and Walsender (an application_name) used from go to done.
	TraceSQL  bool   `json:"trace_sql,omitempty"`
	Walsender string `json:"walsender,omitempty"`

	// The watermill peer (Design designWatermill): its executable, its
	// poll interval (0: peers/watermill's PollDefault), and Init: create
	// its tables and exit after "ready".
	Exe  string        `json:"-"`
	Poll time.Duration `json:"poll,omitempty"`
	Init bool          `json:"init,omitempty"`
}

const (
	designOurs     = "pgoutbox"
	designBaseline = "baseline"
	pubMemory      = "memory"
	pubNATS        = "nats"
)

// params are the relay sessions' runtime parameters.
func (s relaySpec) params() []string {
	if s.AsyncCommit {
		// Safe for at-least-once: a mark lost in a server crash only means
		// the batch is published again.
		return []string{"synchronous_commit", "off"}
	}
	return nil
}

// relayResult is what a relay run reports.
type relayResult struct {
	Elapsed  time.Duration `json:"elapsed"` // go → last expected confirmation
	DoneAt   int64         `json:"done_at"` // last expected confirmation, Unix ns
	Delivery delivery      `json:"delivery"`
	MaxRSSKB int64         `json:"max_rss_kb"`
	UserCPU  float64       `json:"user_cpu_s"`
	SysCPU   float64       `json:"sys_cpu_s"`
	Times    []int64       `json:"times,omitempty"`
	Handed   []int64       `json:"handed,omitempty"` // timed: when each event reached the publisher
	Err      string        `json:"err,omitempty"`

	// TraceSQL: the relay's statements, and its sessions' and its
	// walsender's CPU seconds from go to done.
	SQL          []sqlStat `json:"sql,omitempty"`
	BackendCPU   float64   `json:"backend_cpu_s,omitempty"`
	WalsenderCPU float64   `json:"walsender_cpu_s,omitempty"`
}

// runningRelay is a relay started in this process.
type runningRelay struct {
	cancel context.CancelFunc
	done   chan error
	wake   func()
	status func() outbox.SourceStatus // pgoutbox only
}

func (r *runningRelay) stop() error {
	r.cancel()
	err := <-r.done
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// startRelay starts the relay spec describes on pool, publishing to pub.
func startRelay(ctx context.Context, spec relaySpec, pool *pgxpool.Pool, pub outbox.Publisher) (*runningRelay, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(ctx)
	rr := &runningRelay{cancel: cancel, done: make(chan error, 1), wake: func() {}}
	switch spec.Design {
	case designOurs:
		r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
			Schema: spec.Schema, BatchSize: spec.BatchSize, Workers: spec.Workers,
			Listen: spec.Listen, DeleteOnPublish: spec.Delete, BatchDelay: spec.BatchDelay, RescanInterval: spec.Rescan, Logger: logger,
			Source: outbox.Source(spec.Source), RotateEvents: spec.RotateEvents, RotateInterval: spec.RotateEvery,
		})
		if err != nil {
			cancel()
			return nil, err
		}
		rr.wake = r.Wake
		rr.status = r.SourceStatus
		go func() { rr.done <- r.Run(ctx) }()
	case designBaseline:
		r := newBaselineRelay(pool, baselinePublisherFor{pub}, spec.Schema, logger)
		switch spec.BaselineMode {
		case "poll":
			go func() { rr.done <- r.Run(ctx) }()
		case "listen", "":
			go func() { rr.done <- r.RunListen(ctx) }()
		default:
			cancel()
			return nil, fmt.Errorf("baseline mode %q", spec.BaselineMode)
		}
	default:
		cancel()
		return nil, fmt.Errorf("design %q", spec.Design)
	}
	return rr, nil
}

// newPool connects with the search_path set to schema (the baseline's
// unqualified SQL needs it) and application_name set, so the harness can see
// the relay's sessions in pg_stat_activity.
func newPool(ctx context.Context, url, schema, appName string, maxConns int32, params ...string) (*pgxpool.Pool, error) {
	return newTracedPool(ctx, url, schema, appName, maxConns, nil, params...)
}

// newTracedPool is newPool with t (if not nil) tracing every statement.
func newTracedPool(ctx context.Context, url, schema, appName string, maxConns int32, t *sqlTracer, params ...string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if t != nil {
		cfg.ConnConfig.Tracer = t
	}
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	if appName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	for i := 0; i+1 < len(params); i += 2 {
		cfg.ConnConfig.RuntimeParams[params[i]] = params[i+1]
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	return pool, nil
}

// waitListening blocks until a session named appName has run LISTEN.
func waitListening(ctx context.Context, pool *pgxpool.Pool, appName string) error {
	for {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query ILIKE 'LISTEN%'`, appName).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("relay never listened: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitStreaming blocks until a WAL relay streams its slot: events written
// from then on are timed from a relay that is already reading. It returns
// the relay's error if Run ended (a missing prerequisite, say).
func waitStreaming(ctx context.Context, rr *runningRelay) error {
	for {
		st := rr.status()
		if st.Streaming {
			return nil
		}
		select {
		case err := <-rr.done:
			rr.done <- err // for stop
			return fmt.Errorf("WAL relay ended before streaming: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("WAL relay not streaming (slot %q, standby %v, last error: %v): %w", st.Slot, st.Standby, st.Err, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// publisherFor builds the recording publisher spec asks for; the returned
// func releases it.
func publisherFor(spec relaySpec, rec *recorder) (*recordingPublisher, func(), error) {
	switch spec.Publisher {
	case pubMemory:
		return &recordingPublisher{rec: rec}, func() {}, nil
	case pubNATS:
		nc, err := natsgo.Connect(spec.NatsURL)
		if err != nil {
			return nil, nil, fmt.Errorf("nats %s: %w", spec.NatsURL, err)
		}
		p, err := outboxnats.New(nc, outboxnats.Config{Subject: spec.Subject + ".{event_type}"})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, nc.Close, nil
	case pubKafka:
		p, err := kafka.New(kafka.Config{Brokers: []string{spec.BrokerURL}, Topic: spec.Target})
		if err != nil {
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, p.Close, nil
	case pubRabbitMQ:
		// The default exchange: the routing key is the queue's name.
		p, err := rabbitmq.New(rabbitmq.Config{URL: spec.BrokerURL, RoutingKey: spec.Target, ConnectionName: spec.AppName})
		if err != nil {
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, func() { _ = p.Close() }, nil
	case pubRedis:
		opts, err := goredis.ParseURL(spec.BrokerURL)
		if err != nil {
			return nil, nil, err
		}
		opts.MaxRetries = -1 // the relay retries, as redis's package doc advises
		c := goredis.NewClient(opts)
		p, err := outboxredis.New(c, outboxredis.Config{Stream: spec.Target})
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, func() { _ = c.Close() }, nil
	case pubSQS:
		p, err := outboxsqs.New(outboxsqs.Config{Client: newSQSClient(spec.BrokerURL), QueueURL: spec.Target})
		if err != nil {
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, func() {}, nil
	case pubSNS, pubEventBridge, pubKinesis:
		p, err := awsPublisher(spec)
		if err != nil {
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, func() {}, nil
	case pubWebhook:
		p, err := webhook.New(webhook.Config{URL: spec.Target, Secrets: []string{spec.Secret}, AllowPrivateNetworks: true})
		if err != nil {
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, p.Close, nil
	case pubPubSub:
		p, err := pubsubPublisher(spec)
		if err != nil {
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, func() { _ = p.Close() }, nil
	case pubMQTT:
		p, err := mqttPublisher(spec)
		if err != nil {
			return nil, nil, err
		}
		return &recordingPublisher{rec: rec, next: p}, func() { _ = p.Close() }, nil
	}
	return nil, nil, fmt.Errorf("publisher %q", spec.Publisher)
}

// childMain runs one relay for the parent; see childCommand.
func childMain(args []string) int {
	if err := runChild(args, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "relay child: %v\n", err)
		return 1
	}
	return 0
}

func runChild(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("want one JSON argument")
	}
	var spec relaySpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return err
	}
	ctx := context.Background()
	// pgxpool's default size is max(4, CPUs): room for more workers.
	var tracer *sqlTracer
	if spec.TraceSQL {
		tracer = newSQLTracer(spec.Schema)
	}
	pool, err := newTracedPool(ctx, spec.DatabaseURL, spec.Schema, spec.AppName, int32(max(spec.Workers+2, 4)), tracer, spec.params()...)
	if err != nil {
		return err
	}
	defer pool.Close()
	rec := newRecorder(spec.Expect, spec.Timed)
	pub, closePub, err := publisherFor(spec, rec)
	if err != nil {
		return err
	}
	defer closePub()

	in := bufio.NewReader(stdin)
	fmt.Fprintln(stdout, "ready")
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("expected go, got %q (%v)", line, err)
	}
	if spec.Profile != "" {
		f, err := os.Create(spec.Profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile() // written out before the child exits
	}
	start := time.Now()
	rr, err := startRelay(ctx, spec, pool, pub)
	if err != nil {
		return err
	}
	if spec.Listen || (spec.Design == designBaseline && spec.BaselineMode != "poll") {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := waitListening(wctx, pool, spec.AppName)
		cancel()
		if err != nil {
			rr.stop()
			return err
		}
	}
	if spec.Source == string(outbox.SourceWAL) {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := waitStreaming(wctx, rr)
		cancel()
		if err != nil {
			rr.stop()
			return err
		}
	}
	fmt.Fprintln(stdout, "running")
	var cpu0 map[string]map[int]float64
	roles := map[string]string{"relay": spec.AppName}
	if spec.Walsender != "" {
		roles["walsender"] = spec.Walsender
	}
	if spec.TraceSQL {
		cpu0 = sessionCPU(ctx, pool, roles)
	}

	expect := int64(spec.Expect)
	if expect == 0 { // serve mode
		line, err := in.ReadString('\n')
		if err != nil {
			rr.stop()
			return err
		}
		expect, err = strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "stop "), 10, 64)
		if err != nil {
			rr.stop()
			return fmt.Errorf("expected stop N, got %q", line)
		}
	}
	rec.setTarget(expect)
	wctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	doneAt := rec.wait(wctx)
	cancel()
	res := relayResult{Delivery: rec.delivery(expect)}
	if doneAt.IsZero() {
		res.Err = fmt.Sprintf("only %d of %d events confirmed within %s", res.Delivery.Distinct, expect, spec.Timeout)
	} else {
		res.Elapsed = doneAt.Sub(start)
		res.DoneAt = doneAt.UnixNano()
	}
	if spec.TraceSQL {
		used := cpuUsed(cpu0, sessionCPU(ctx, pool, roles))
		res.BackendCPU, res.WalsenderCPU = used["relay"], used["walsender"]
		res.SQL = tracer.stats()
	}
	// Let the batch in flight commit its marks before stopping: the
	// baseline relay would otherwise roll back a batch it has published (at
	// least once: it would send it again on its next run).
	if !doneAt.IsZero() {
		settle(ctx, pool, 10*time.Second)
	}
	if err := rr.stop(); err != nil && res.Err == "" {
		res.Err = err.Error()
	}
	res.Delivery = rec.delivery(expect) // duplicates sent while stopping count too
	if spec.Timed {
		res.Times = rec.times
		res.Handed = rec.handed
	}
	res.MaxRSSKB = vmHWM()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.UserCPU = tv(ru.Utime)
		res.SysCPU = tv(ru.Stime)
	}
	return json.NewEncoder(stdout).Encode(res)
}

// settle waits until the table (on the pool's search_path) has no
// unprocessed row, or d passes.
func settle(ctx context.Context, pool *pgxpool.Pool, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var pending bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM outbox_events WHERE processed_at IS NULL)").Scan(&pending); err != nil || !pending {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
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

// relayChild is the parent's handle on a child relay process.
type relayChild struct {
	spec  relaySpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// spawnRelay starts a child relay process and waits until it is ready.
func spawnRelay(ctx context.Context, spec relaySpec) (*relayChild, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if spec.Design == designWatermill {
		if spec.Exe == "" {
			return nil, errors.New("the watermill peer was not built")
		}
		cmd = exec.CommandContext(ctx, spec.Exe, string(b))
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd = exec.CommandContext(ctx, exe, childCommand, string(b))
	}
	cmd.Stderr = os.Stderr
	// Under the race detector (go test -race) a process sleeps 1 s at exit
	// by default; the harness waits for every child's exit.
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &relayChild{spec: spec, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	if err := c.expect("ready"); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

func (c *relayChild) expect(want string) error {
	line, err := c.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("relay child: waiting for %q: %w", want, err)
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("relay child: want %q, got %q", want, got)
	}
	return nil
}

// start starts the relay and returns once it runs (and listens).
func (c *relayChild) start() error {
	if _, err := fmt.Fprintln(c.stdin, "go"); err != nil {
		return err
	}
	return c.expect("running")
}

// finish waits for the result: in serve mode, after telling the child how
// many distinct events to wait for.
func (c *relayChild) finish(n int64) (relayResult, error) {
	var res relayResult
	if c.spec.Expect == 0 {
		if _, err := fmt.Fprintf(c.stdin, "stop %d\n", n); err != nil {
			c.kill()
			return res, err
		}
	}
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		c.kill()
		return res, fmt.Errorf("relay child: reading result: %w", err)
	}
	if res, err = parseResult(line); err != nil {
		c.kill()
		return res, err
	}
	c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		return res, fmt.Errorf("relay child: %w", err)
	}
	// Peak RSS is the child's own VmHWM. Not getrusage's ru_maxrss: Go
	// starts children with vfork semantics, and Linux folds the parent's
	// peak RSS at exec time into the child's ru_maxrss.
	if res.Err != "" {
		return res, errors.New(res.Err)
	}
	return res, nil
}

// parseResult reads a child's (or the peer's) last line: its result.
func parseResult(line []byte) (relayResult, error) {
	var res relayResult
	if err := json.Unmarshal(line, &res); err != nil {
		return res, fmt.Errorf("relay child: result %.200q: %w", line, err)
	}
	if res.Delivery.Expected < 0 || res.Delivery.Distinct < 0 || res.Delivery.Total < res.Delivery.Distinct {
		return res, fmt.Errorf("relay child: result %.200q: delivery counts do not add up", line)
	}
	return res, nil
}

func (c *relayChild) kill() {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Kill()
	}
	_ = c.cmd.Wait()
}
