// Command bench measures pgoutbox against a baseline relay (the common
// hand-written outbox: a NOTIFY trigger, one UPDATE per event) on
// the local PostgreSQL and NATS: how fast a backlog drains, how much the relay
// slows the writers, how long an event waits between commit and broker, and
// what a large table costs. It also drains the same backlog through every
// broker pgoutbox ships a publisher for (NATS JetStream, Kafka, RabbitMQ,
// Redis Streams, SQS, webhooks), each against the in-memory drain of the same
// run; Kafka (kfake), SQS (internal/sqsfake) and the webhook receiver run in
// the harness process, RabbitMQ and Redis are the local servers. It prints
// markdown tables; see BENCHMARKS.md.
//
//	go run ./bench            # the full run (~18 min on 2 cores)
//	go run ./bench --quick    # smaller sizes (~3 min)
//	go run ./bench --only brokers --brokers kafka,redis --broker-events 50000
//	go run ./bench --json out.json && go run ./bench chart out.json docs/bench
//	go run ./bench --only write,wal,walsize  # the WAL source beside the table source
//	go run ./bench --quick --only wal --wal-tx 1,100 --wal-profile /tmp/walprof  # where the WAL source's time goes
//	go run ./bench --quick --only cpu        # CPU per event of every mode at 2,000 orders/s
//	go run ./bench phases DIR/*.pprof        # a relay profile's CPU by phase
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/rabbitmq"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		os.Exit(childMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == burnCommand {
		os.Exit(burnMain())
	}
	if len(os.Args) > 1 && os.Args[1] == phasesCommand {
		os.Exit(phasesMain(os.Args[2:], os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == "chart" {
		os.Exit(chartMain(os.Args[2:], os.Stderr))
	}
	opt, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cmdline := "go run ./bench"
	if len(os.Args) > 1 {
		cmdline += " " + strings.Join(os.Args[1:], " ")
	}
	if err := run(ctx, opt, os.Stdout, cmdline); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	def := os.Getenv("DATABASE_URL")
	if def == "" {
		def = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	natsDef := os.Getenv("NATS_URL")
	if natsDef == "" {
		natsDef = "nats://127.0.0.1:4222"
	}
	rabbitDef := os.Getenv("RABBITMQ_URL")
	if rabbitDef == "" {
		rabbitDef = rabbitmq.DefaultURL
	}
	redisDef := os.Getenv("REDIS_URL")
	if redisDef == "" {
		redisDef = "redis://127.0.0.1:6379/0"
	}
	var (
		opt                            options
		only, brokers, walRates, walTx string
	)
	fs.StringVar(&opt.DatabaseURL, "database-url", def, "PostgreSQL URL (default $DATABASE_URL)")
	fs.StringVar(&opt.NatsURL, "nats-url", natsDef, "NATS URL (default $NATS_URL)")
	fs.BoolVar(&opt.Quick, "quick", false, "smaller sizes: 100k backlog, 1M retained rows, shorter windows")
	fs.IntVar(&opt.Runs, "runs", 0, "runs of every figure; tables show medians (default 3, --quick 1)")
	fs.IntVar(&opt.Events, "events", 0, "drain backlog (default 1M, --quick 100k)")
	fs.IntVar(&opt.BaselineCap, "baseline-events", 0, "the baseline's drain backlog (default min(events, 30k), --quick 5k: its relay is 3-6x slower)")
	fs.BoolVar(&opt.Extra, "extra", false, "also pgoutbox configured otherwise: BatchSize 100 (the baseline's), DeleteOnPublish, Workers 4, relay sessions with synchronous_commit=off, Notifier Interval 20ms, polling only; both sources with BatchDelay off (write; wal: latency)")
	fs.StringVar(&only, "only", "", "comma-separated subset of drain,write,latency,growth,brokers,wal,walsize,cpu (default: all but wal, walsize and cpu)")
	fs.StringVar(&brokers, "brokers", strings.Join(allBrokers, ","), "brokers: the drains besides the in-memory reference, a subset of "+strings.Join(allBrokers, ","))
	fs.IntVar(&opt.BrokerEvents, "broker-events", 0, "brokers: backlog of each drain (default min(events, 100k), --quick min(events, 20k))")
	fs.StringVar(&opt.RabbitMQURL, "rabbitmq-url", rabbitDef, "brokers: RabbitMQ AMQP URL (default $RABBITMQ_URL)")
	fs.StringVar(&opt.RedisURL, "redis-url", redisDef, "brokers: Redis URL (default $REDIS_URL)")
	mqttDef := os.Getenv("MQTT_URL")
	if mqttDef == "" {
		mqttDef = defaultMQTTURL
	}
	fs.StringVar(&opt.MQTTURL, "mqtt-url", mqttDef, "brokers: MQTT broker URL (default $MQTT_URL)")
	fs.BoolVar(&opt.Keep, "keep", false, "keep the schemas and streams")
	fs.IntVar(&opt.Writers, "writers", 8, "concurrent writers")
	fs.DurationVar(&opt.WriteWindow, "write-window", 0, "write-cost window per phase (default 10s, --quick 3s)")
	fs.IntVar(&opt.Rate, "rate", 1000, "latency: events/s")
	fs.IntVar(&opt.LatWriters, "latency-writers", 16, "latency: paced writers (enough that slow commits do not throttle the rate)")
	fs.DurationVar(&opt.LatWindow, "latency-window", 0, "latency window (default 30s, --quick 5s)")
	fs.BoolVar(&opt.LatMemory, "latency-memory", false, "latency: also the in-memory publisher")
	fs.StringVar(&opt.Filter, "filter", "", "drain, write and wal: only the relays and phases whose label contains this, or one of these |-separated strings (the raw SQL floor and the no-relay baselines always run)")
	fs.BoolVar(&opt.SampleWaits, "sample-waits", false, "drain: sample the relay's sessions in pg_stat_activity every 5 ms (adds load)")
	fs.IntVar(&opt.GrowthRows, "growth-rows", 0, "processed rows retained (default 10M, --quick 1M)")
	fs.IntVar(&opt.GrowthBatch, "growth-batch", 0, "pending rows drained in the growth figure (default 100k, --quick 10k)")
	fs.IntVar(&opt.ClaimSamples, "claim-samples", 200, "claims timed per table state")
	fs.IntVar(&opt.Workers, "workers", outbox.DefaultWorkers, "raw SQL floor connections (pgoutbox's default relay workers)")
	fs.DurationVar(&opt.Timeout, "timeout", 10*time.Minute, "longest wait for a relay to deliver")
	fs.IntVar(&opt.WriteRate, "write-rate", 0, "write: pace the writers at this many orders/s in all instead of full speed (the per-order costs at a given rate; the ratio then only says whether the rate was held)")
	fs.BoolVar(&opt.WriteWaits, "write-waits", false, "write: sample the writers' and the relay's sessions in pg_stat_activity every 10 ms (adds load)")
	fs.BoolVar(&opt.PinRelay, "pin-relay", false, "write: the writers (this process, their sessions) on the first CPU, each relay process, its sessions and its walsender on the others: the relay's cost to the writers when it has cores of its own (Linux, PostgreSQL on this machine, root or CAP_SYS_NICE; phases with the relay in the writers' process are left out, and a control phase keeps the relay's CPUs busy with a loop that touches no database)")
	fs.StringVar(&opt.WriteProfile, "write-profile", "", "write: write a CPU profile of the harness process (writers, and the relay when in process) per phase into this directory")
	fs.StringVar(&opt.DrainProfile, "drain-profile", "", "drain, wal: write a CPU profile of each drain's relay process into this directory")
	fs.StringVar(&walTx, "wal-tx", "1,100", "wal: events per transaction of the drains' backlogs, comma-separated (a drain of each shape); walsize: the largest")
	fs.StringVar(&opt.WALProfile, "wal-profile", "", "wal: write a CPU profile of each WAL drain's relay into this directory, count and time its statements, read its sessions' and walsender's CPU, and print where its time went")
	fs.IntVar(&opt.CPURate, "cpu-rate", 2000, "cpu: writers paced at this many orders/s in all, a rate every mode holds")
	fs.BoolVar(&opt.Watermill, "watermill", true, "drain, latency, wal, cpu: also Watermill's SQL forwarder (bench/peers/watermill, built with the go command on first use)")
	fs.StringVar(&walRates, "wal-rates", "1000,10000", "wal: latency rates, events/s, comma-separated")
	fs.IntVar(&opt.WALTxRate, "wal-tx-rate", 1000, "wal: latency writers commit at most this many transactions/s; a higher rate puts several events in each")
	fs.DurationVar(&opt.WALLatWindow, "wal-latency-window", 0, "wal: latency window per phase (default 20s, --quick 5s)")
	fs.IntVar(&opt.WALSizeEvents, "wal-size-events", 0, "walsize: events streamed (default 10M, --quick 200k)")
	fs.IntVar(&opt.WALSizePoints, "wal-size-points", 10, "walsize: chunks, each followed by a size sample")
	fs.StringVar(&opt.JSONOut, "json", "", "also write every figure's per-run values to this file, for: go run ./bench chart FILE DIR")
	if err := fs.Parse(args); err != nil {
		return opt, err
	}
	if fs.NArg() > 0 {
		return opt, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	pick := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if opt.Quick {
				*v = quick
			}
		}
	}
	pickD := func(v *time.Duration, full, quick time.Duration) {
		if *v == 0 {
			*v = full
			if opt.Quick {
				*v = quick
			}
		}
	}
	pick(&opt.Events, 1_000_000, 100_000)
	pick(&opt.GrowthRows, 10_000_000, 1_000_000)
	pick(&opt.GrowthBatch, 100_000, 10_000)
	pick(&opt.BaselineCap, min(opt.Events, 30_000), min(opt.Events, 5_000))
	pick(&opt.BrokerEvents, min(opt.Events, 100_000), min(opt.Events, 20_000))
	pick(&opt.Runs, 3, 1)
	pickD(&opt.WriteWindow, 10*time.Second, 3*time.Second)
	pickD(&opt.LatWindow, 30*time.Second, 5*time.Second)
	pickD(&opt.WALLatWindow, 20*time.Second, 5*time.Second)
	pick(&opt.WALSizeEvents, 10_000_000, 200_000)
	for _, x := range strings.Split(walRates, ",") {
		if x = strings.TrimSpace(x); x == "" {
			continue
		}
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 {
			return opt, fmt.Errorf("--wal-rates: %q is not a positive rate", x)
		}
		opt.WALRates = append(opt.WALRates, n)
	}
	for _, x := range strings.Split(walTx, ",") {
		if x = strings.TrimSpace(x); x == "" {
			continue
		}
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 {
			return opt, fmt.Errorf("--wal-tx: %q is not a positive number of events", x)
		}
		if !slices.Contains(opt.WALTxs, n) {
			opt.WALTxs = append(opt.WALTxs, n)
		}
	}
	if len(opt.WALTxs) == 0 {
		return opt, errors.New("--wal-tx: give at least one number of events per transaction")
	}
	opt.WALTx = slices.Max(opt.WALTxs)
	opt.Only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "drain", "write", "latency", "growth", "brokers", "wal", "walsize", "cpu":
			opt.Only[s] = true
		default:
			return opt, fmt.Errorf("--only: unknown figure %q (want drain, write, latency, growth, brokers, wal, walsize, cpu)", s)
		}
	}
	for _, s := range strings.Split(brokers, ",") {
		switch s = strings.TrimSpace(s); {
		case s == "":
		case !slices.Contains(allBrokers, s):
			return opt, fmt.Errorf("--brokers: unknown broker %q (want some of %s; the in-memory drain always runs)", s, strings.Join(allBrokers, ", "))
		case !slices.Contains(opt.Brokers, s):
			opt.Brokers = append(opt.Brokers, s)
		}
	}
	switch {
	case opt.Events < 1 || opt.BaselineCap < 1 || opt.GrowthBatch < 1 || opt.GrowthRows < 1 || opt.BrokerEvents < 1:
		return opt, errors.New("--events, --baseline-events, --growth-rows, --growth-batch, --broker-events must be positive")
	case opt.Writers < 1 || opt.LatWriters < 1 || opt.Rate < 1 || opt.Workers < 1 || opt.ClaimSamples < 1:
		return opt, errors.New("--writers, --rate, --workers, --claim-samples must be positive")
	case opt.WALTxRate < 1 || opt.WALSizePoints < 1 || opt.WALSizeEvents < opt.WALSizePoints:
		return opt, errors.New("--wal-tx-rate, --wal-size-points must be positive, --wal-size-events at least --wal-size-points")
	case opt.CPURate < 1:
		return opt, errors.New("--cpu-rate must be positive")
	}
	opt.Log = errOut
	return opt, nil
}

// run measures every selected figure opt.Runs times and prints the tables.
func run(ctx context.Context, opt options, out io.Writer, cmdline string) error {
	started := time.Now()
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	h, err := newHarness(ctx, opt)
	if err != nil {
		return err
	}
	defer h.close()
	m := h.machine(ctx)
	h.logf("%s; %d CPUs; schemas %s_*", m.Postgres, m.CPUs, h.prefix)
	r, err := h.measure(ctx)
	if err != nil {
		return err
	}
	r.loads = h.loads
	if h.walErr != nil {
		r.walSkipped = h.walErr.Error()
	}
	r.print(out, m, opt, cmdline, started, time.Since(started))
	r.printTargets(out, opt)
	if opt.JSONOut != "" {
		return writeResultsFile(opt.JSONOut, r.file(m, opt, cmdline, started, time.Since(started)))
	}
	return nil
}

func (h *harness) measure(ctx context.Context) (*results, error) {
	r := &results{}
	var g *growthTables
	if h.opt.want("growth") {
		var err error
		if g, err = h.growthSetup(ctx); err != nil {
			return nil, fmt.Errorf("growth setup: %w", err)
		}
	}
	runs := h.opt.Runs
	if !slices.ContainsFunc([]string{"drain", "brokers", "write", "latency", "growth", "wal", "cpu"}, h.opt.want) {
		runs = 0 // walsize alone: it runs once
	}
	for i := range runs {
		h.logf("=== run %d of %d", i+1, h.opt.Runs)
		clear(h.sameRun)
		if h.opt.want("drain") {
			if err := h.drainRun(ctx, r); err != nil {
				return nil, fmt.Errorf("drain: %w", err)
			}
		}
		if h.opt.want("brokers") {
			if err := h.brokersRun(ctx, r); err != nil {
				return nil, fmt.Errorf("brokers: %w", err)
			}
		}
		if h.opt.want("write") {
			if err := h.writeRun(ctx, r); err != nil {
				return nil, fmt.Errorf("write: %w", err)
			}
		}
		if h.opt.want("latency") {
			if err := h.latencyRun(ctx, r); err != nil {
				return nil, fmt.Errorf("latency: %w", err)
			}
		}
		if h.opt.want("growth") {
			if err := h.growthRun(ctx, r, g, i == 0); err != nil {
				return nil, fmt.Errorf("growth: %w", err)
			}
		}
		if h.opt.want("wal") {
			if err := h.walRun(ctx, r); err != nil {
				return nil, fmt.Errorf("wal: %w", err)
			}
		}
		if h.opt.want("cpu") {
			if err := h.cpuRun(ctx, r); err != nil {
				return nil, fmt.Errorf("cpu: %w", err)
			}
		}
	}
	if h.opt.want("walsize") { // once: a long stream, sampled as it goes
		for _, partitioned := range []bool{false, true} {
			if err := h.walSizeRun(ctx, r, partitioned); err != nil {
				return nil, fmt.Errorf("walsize: %w", err)
			}
		}
	}
	return r, nil
}

// matchesFilter tells whether label passes --filter: empty, or label
// contains one of its |-separated strings.
func matchesFilter(label, filter string) bool {
	if filter == "" {
		return true
	}
	for _, f := range strings.Split(filter, "|") {
		if f != "" && strings.Contains(label, f) {
			return true
		}
	}
	return false
}
