// Command flakyrelay is a relay for the reliability suite's ordered torture
// scenario: the library's Relay publishing to NATS JetStream through a
// publisher that fails a share of publishes on purpose, as a flaky broker
// would (a transient error, or a publish that hangs past the publish
// timeout). The outbox command has no such fault injection, and should not.
//
//	DATABASE_URL=... flakyrelay -schema s -nats nats://127.0.0.1:4222 -subject 'S.{event_type}' -fail-pct 10 -hang-pct 1 -source wal
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

func main() {
	var (
		schema     = flag.String("schema", "", "schema of the outbox table")
		natsURL    = flag.String("nats", "", "NATS URL")
		subject    = flag.String("subject", "{event_type}", "subject template")
		source     = flag.String("source", "table", "table or wal")
		ordered    = flag.Bool("ordered", true, "per-aggregate ordering")
		workers    = flag.Int("workers", 2, "workers")
		batch      = flag.Int("batch-size", 20, "batch size")
		timeout    = flag.Duration("publish-timeout", 300*time.Millisecond, "publish timeout")
		attempts   = flag.Int("max-attempts", 1000, "max attempts")
		failPct    = flag.Int("fail-pct", 10, "percent of publishes failed with a transient error")
		hangPct    = flag.Int("hang-pct", 1, "percent of publishes that hang until the publish timeout")
		seed       = flag.Uint64("seed", uint64(time.Now().UnixNano()), "random seed")
		statsEvery = flag.Duration("stats-interval", 2*time.Second, "stats interval")
		rotate     = flag.Int("rotate-events", 0, "partitioned table: RotateEvents (0: the default)")
	)
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log, *schema, *natsURL, *subject, outbox.Source(*source), *ordered, *workers, *batch, *timeout, *attempts,
		*failPct, *hangPct, *seed, *statsEvery, *rotate); err != nil {
		log.Error("flakyrelay failed", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, schema, natsURL, subject string, source outbox.Source, ordered bool, workers, batch int,
	timeout time.Duration, attempts, failPct, hangPct int, seed uint64, statsEvery time.Duration, rotate int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	u, err := url.Parse(natsURL)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("subject", subject)
	u.RawQuery = q.Encode()
	inner, err := outboxnats.NewFromURL(u)
	if err != nil {
		return err
	}
	defer inner.Close()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	pub := &flaky{inner: inner, failPct: failPct, hangPct: hangPct, rnd: rand.New(rand.NewPCG(seed, seed>>1|1))}
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
		Schema: schema, Source: source, Ordered: ordered, Workers: workers, BatchSize: batch,
		PollInterval: 20 * time.Millisecond, PublishTimeout: timeout, MaxAttempts: attempts,
		RetryBackoff:  outbox.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		OutageBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond},
		StatsInterval: statsEvery, Logger: log, RotateEvents: rotate, RotateInterval: time.Second,
	})
	if err != nil {
		return err
	}
	log.Info("outbox relay started", "source", string(source), "fail_pct", failPct, "hang_pct", hangPct)
	err = r.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("outbox relay stopped", "injected_failures", pub.failed, "injected_hangs", pub.hung)
	return err
}

// flaky fails a share of publishes before they reach the broker.
type flaky struct {
	inner            *outboxnats.Publisher
	failPct, hangPct int
	mu               sync.Mutex
	rnd              *rand.Rand
	failed, hung     int
}

var errInjected = errors.New("flakyrelay: injected broker nack")

func (f *flaky) roll() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.IntN(100)
}

func (f *flaky) count(hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if hang {
		f.hung++
	} else {
		f.failed++
	}
}

func (f *flaky) Publish(ctx context.Context, m *outbox.Message) error {
	return f.PublishBatch(ctx, []*outbox.Message{m})[0]
}

// PublishBatch fails the messages the dice pick and sends the rest in one
// batch; a hang holds the whole batch until ctx ends, as a broker that
// stopped answering would.
func (f *flaky) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	var send []*outbox.Message
	var at []int
	hang := false
	for i, m := range msgs {
		switch roll := f.roll(); {
		case roll < f.failPct:
			f.count(false)
			errs[i] = fmt.Errorf("%w (event %s)", errInjected, m.ID)
		case roll < f.failPct+f.hangPct:
			hang = true
			send = append(send, m)
			at = append(at, i)
		default:
			send = append(send, m)
			at = append(at, i)
		}
	}
	if hang {
		f.count(true)
		<-ctx.Done()
		for _, i := range at {
			errs[i] = ctx.Err()
		}
		return errs
	}
	if len(send) > 0 {
		res := f.inner.PublishBatch(ctx, send)
		for j, i := range at {
			if res != nil {
				errs[i] = res[j]
			}
		}
	}
	return errs
}
