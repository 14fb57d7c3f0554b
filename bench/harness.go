package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsfake"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/sqsfake"
	"github.com/pgoutbox/outbox/internal/wal"
)

// options are the command's flags.
type options struct {
	DatabaseURL  string
	NatsURL      string
	Quick        bool
	Runs         int
	Events       int    // drain backlog
	BaselineCap  int    // the baseline's drain backlog (its relay is 10-20x slower)
	Extra        bool   // drain: tuned pgoutbox configurations too
	SampleWaits  bool   // drain: sample the relay's sessions in pg_stat_activity
	Filter       string // drain: only the relays whose label contains this
	Only         map[string]bool
	Keep         bool
	Writers      int           // write-cost writers
	LatWriters   int           // latency writers (paced)
	WriteWindow  time.Duration // write-cost window per phase
	Rate         int           // latency: events/s
	LatWindow    time.Duration // latency window
	LatMemory    bool
	GrowthRows   int // processed rows retained in the growth figure
	GrowthBatch  int // pending rows drained in the growth figure
	ClaimSamples int
	Workers      int // relay workers (pgoutbox default) and raw-floor connections
	Timeout      time.Duration
	Log          io.Writer
	Prefix       string   // schema and stream name prefix (default bench_<random>)
	Brokers      []string // figure 5: the brokers besides the in-memory reference (allBrokers' names)
	BrokerEvents int      // figure 5's backlog
	RabbitMQURL  string
	RedisURL     string
	MQTTURL      string
	JSONOut      string // --json: results file
	WriteWaits   bool   // write: sample the writers' and relay's sessions
	WriteRate    int    // write: writers paced at this many orders/s in all (0: full speed)
	WriteProfile string // write: CPU profile of every phase into this directory
	PinRelay     bool   // write: writers on the first CPU, each relay process and its sessions on the others
	DrainProfile string // drain, wal: CPU profile of every drain's relay process into this directory
	CPURate      int    // cpu: writers paced at this many orders/s in all
	Watermill    bool   // the watermill peer beside pgoutbox (drain, latency, wal, cpu)

	// The WAL source's figures (wal, walsize).
	WALTx         int    // events per transaction of the size figure's stream: the largest of WALTxs
	WALTxs        []int  // events per transaction of the WAL drains' backlogs, one drain of each shape
	WALProfile    string // wal: CPU profile, statements and sessions' CPU of every WAL drain's relay, into this directory
	WALRates      []int  // latency rates, events/s
	WALTxRate     int    // latency: most writer transactions per second (higher rates put several events in each)
	WALLatWindow  time.Duration
	WALSizeEvents int // events streamed in the size figure
	WALSizePoints int // chunks (size samples) among them

	// For tests: servers to use instead of starting them in process (the
	// harness leaves them running), and a hook told of every stream, topic,
	// queue and webhook receiver the harness creates.
	kafkaCluster *kfake.Cluster
	sqsServer    *sqsfake.Server
	pubsubServer *pstest.Server
	awsServer    *awsfake.Server
	onCreate     func(pub, name string)
}

// want reports whether a figure runs: every figure but the WAL source's own
// (wal, walsize) when --only is not given, which run only when named.
func (o *options) want(s string) bool {
	if s == "wal" || s == "walsize" || s == "cpu" {
		return o.Only[s]
	}
	return len(o.Only) == 0 || o.Only[s]
}

// harness owns the database schemas, NATS streams and broker destinations
// (figure 5) of one invocation.
type harness struct {
	opt     options
	pool    *pgxpool.Pool // admin pool, no search_path
	prefix  string        // bench_<random>: every schema and stream name starts with it
	schemas []string
	nc      *natsgo.Conn
	js      jetstream.JetStream
	streams []string
	seq     int

	brokers brokers        // figure 5's
	dests   []*destination // every broker destination opened, removed by close unless --keep
	sameRun map[string]sameRun

	repl   []string // schemas whose table has a publication and slot (the WAL source's), dropped even with --keep
	walErr error    // why the server cannot run the WAL source (nil: it can)

	lastWaits    []string  // the last drain's wait sample (--sample-waits)
	noCheckpoint bool      // CHECKPOINT was refused once
	loads        []float64 // 1-minute load average at every progress line

	peerExe, peerTmp string // the watermill peer's executable, built on first use, and its directory
	peerErr          error
	floors           []string // server decode floor slots, dropped even with --keep
}

func newHarness(ctx context.Context, opt options) (*harness, error) {
	pool, err := newPool(ctx, opt.DatabaseURL, "", "pgoutbox-bench", 16)
	if err != nil {
		return nil, err
	}
	if opt.Prefix == "" {
		opt.Prefix = "bench_" + randHex(4)
	}
	h := &harness{opt: opt, pool: pool, prefix: opt.Prefix, sameRun: map[string]sameRun{}}
	if opt.want("drain") || opt.want("latency") || opt.want("wal") || (opt.want("brokers") && slices.Contains(opt.Brokers, pubNATS)) {
		nc, err := natsgo.Connect(opt.NatsURL)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("NATS at %s: %w", opt.NatsURL, err)
		}
		h.nc = nc
		if h.js, err = jetstream.New(nc); err != nil {
			pool.Close()
			nc.Close()
			return nil, err
		}
	}
	if opt.want("brokers") {
		if err := h.openBrokers(ctx); err != nil {
			h.close()
			return nil, err
		}
	}
	if opt.want("write") || opt.want("wal") || opt.want("walsize") || opt.want("cpu") {
		// The WAL source's phases need wal_level=logical, a role that may
		// replicate and a free slot; without them the rest still runs and
		// the output says why those phases did not.
		h.walErr = outbox.CheckReplication(ctx, pool, outbox.MigrateConfig{Schema: h.prefix + "_check"})
		if h.walErr != nil {
			h.logf("WAL source phases skipped: %v", h.walErr)
		}
	}
	return h, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *harness) logf(format string, args ...any) {
	load := loadAvg()
	if load >= 0 {
		h.loads = append(h.loads, load)
	}
	fmt.Fprintf(h.opt.Log, "[%s load %.1f] %s\n", time.Now().Format("15:04:05"), load, fmt.Sprintf(format, args...))
}

// loadAvg is the 1-minute load average (-1 if unknown): the machine is
// shared, and the report says how busy it was.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	x, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return x
}

// close drops every schema and stream the harness created, unless --keep.
func (h *harness) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if h.opt.Keep {
		h.logf("keeping schemas %s and streams %s", strings.Join(h.schemas, ", "), strings.Join(h.streams, ", "))
		var kept []string
		for _, d := range h.dests {
			kept = append(kept, d.what)
		}
		if len(kept) > 0 {
			h.logf("keeping %s (the in-process Kafka, SQS and webhook servers stop with the harness)", strings.Join(kept, ", "))
		}
	}
	// A slot left behind would keep every byte of WAL the server writes from
	// now on: these go whatever happened, --keep included.
	for _, s := range slices.Clone(h.repl) {
		h.dropReplication(ctx, s)
	}
	for _, f := range slices.Clone(h.floors) {
		h.dropFloor(ctx, f)
	}
	if h.peerTmp != "" {
		_ = os.RemoveAll(h.peerTmp)
	}
	if !h.opt.Keep {
		for _, s := range h.schemas {
			h.dropSchema(ctx, s)
		}
		for _, s := range h.streams {
			_ = h.js.DeleteStream(ctx, s)
		}
		for _, d := range h.dests {
			h.releaseDestination(ctx, d)
		}
	}
	h.closeBrokers()
	if h.nc != nil {
		h.nc.Close()
	}
	h.pool.Close()
}

func (h *harness) dropSchema(ctx context.Context, s string) {
	if _, err := h.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
		h.logf("drop schema %s: %v", s, err)
	}
}

// release drops a schema as soon as a figure is done with it, so a run never
// holds more than a few million rows at once.
func (h *harness) release(ctx context.Context, s string) {
	if slices.Contains(h.repl, s) {
		h.dropReplication(ctx, s)
	}
	if h.opt.Keep {
		return
	}
	h.dropSchema(ctx, s)
	for i, x := range h.schemas {
		if x == s {
			h.schemas = append(h.schemas[:i], h.schemas[i+1:]...)
			break
		}
	}
}

// newSchema creates an empty schema bench_<random>_<n>_<what>.
func (h *harness) newSchema(ctx context.Context, what string) (string, error) {
	h.seq++
	s := fmt.Sprintf("%s_%d_%s", h.prefix, h.seq, what)
	if _, err := h.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
		return "", err
	}
	h.schemas = append(h.schemas, s)
	return s, nil
}

// setupOurs creates a schema with pgoutbox's migrated table and the orders
// table.
func (h *harness) setupOurs(ctx context.Context, what string) (string, error) {
	return h.setupTable(ctx, what, false)
}

// setupTable is setupOurs with the outbox table partitioned or not.
func (h *harness) setupTable(ctx context.Context, what string, partitioned bool) (string, error) {
	s, err := h.newSchema(ctx, what)
	if err != nil {
		return "", err
	}
	if _, err := outbox.Migrate(ctx, h.pool, outbox.MigrateConfig{Schema: s, Partitioned: partitioned}); err != nil {
		return "", err
	}
	if _, err := h.exec(ctx, s, ordersSQL); err != nil {
		return "", err
	}
	return s, nil
}

// setupWAL is setupOurs plus what `outbox migrate --source wal` adds: the
// table's publication and replication slot, which the slot keeps WAL for
// from now on. release and close drop them.
func (h *harness) setupWAL(ctx context.Context, what string) (string, error) {
	return h.setupWALTable(ctx, what, false)
}

// setupWALTable is setupWAL on a partitioned table or not.
func (h *harness) setupWALTable(ctx context.Context, what string, partitioned bool) (string, error) {
	if h.walErr != nil {
		return "", h.walErr
	}
	s, err := h.setupTable(ctx, what, partitioned)
	if err != nil {
		return "", err
	}
	h.repl = append(h.repl, s) // before creating, so a half-done setup is dropped too
	if _, err := outbox.SetupReplication(ctx, h.pool, outbox.MigrateConfig{Schema: s, Partitioned: partitioned}); err != nil {
		return "", err
	}
	return s, nil
}

// setupLean is setupOurs with the table set up for the WAL source as
// `outbox migrate --source wal` leaves it, less the publication and slot:
// the writers' side of the WAL source with no relay.
func (h *harness) setupLean(ctx context.Context, what string) (string, error) {
	s, err := h.setupOurs(ctx, what)
	if err != nil {
		return s, err
	}
	n, err := ident.New(s, "")
	if err != nil {
		return s, err
	}
	return s, wal.DropTableSourceIndexes(ctx, h.pool, wal.NamesFor(n, ""))
}

// setupBusiness creates a schema with the orders table alone: the business
// row without any outbox.
func (h *harness) setupBusiness(ctx context.Context, what string) (string, error) {
	s, err := h.newSchema(ctx, what)
	if err != nil {
		return "", err
	}
	if _, err := h.exec(ctx, s, ordersSQL); err != nil {
		return s, err
	}
	return s, nil
}

// walsenderApp is the application_name of the walsender streaming
// schema's slot (internal/wal names its replication connection so), as
// pg_stat_activity shows it: cut to NAMEDATALEN-1 (63) bytes.
func (h *harness) walsenderApp(schema string) string {
	name := "pgoutbox relay " + h.slotName(schema)
	return name[:min(len(name), 63)]
}

// slotName is the WAL source's slot for schema's table (in the bench's
// database, which the slot's name includes).
func (h *harness) slotName(schema string) string {
	n, err := ident.New(schema, "")
	if err != nil {
		return ""
	}
	return wal.NamesFor(n, h.pool.Config().ConnConfig.Database).Slot
}

// dropReplication drops schema's slot and publication (ending the stream
// of a relay still reading it).
func (h *harness) dropReplication(ctx context.Context, s string) {
	if n, err := ident.New(s, ""); err == nil {
		if rn, err := wal.Resolve(ctx, h.pool, n); err == nil {
			_ = wal.Terminate(ctx, h.pool, rn)
		}
	}
	if err := outbox.DropReplication(ctx, h.pool, outbox.MigrateConfig{Schema: s}); err != nil {
		h.logf("drop the replication slot and publication of %s: %v", s, err)
		return
	}
	h.repl = slices.DeleteFunc(h.repl, func(x string) bool { return x == s })
}

// setupBaseline creates a schema with the baseline's table (and its trigger).
func (h *harness) setupBaseline(ctx context.Context, what string, trigger bool) (string, error) {
	s, err := h.newSchema(ctx, what)
	if err != nil {
		return "", err
	}
	sql := baselineSchemaSQL + ordersSQL
	if trigger {
		sql += fmt.Sprintf(baselineTriggerSQL, baselineChannel(s))
	}
	if _, err := h.exec(ctx, s, sql); err != nil {
		return "", err
	}
	return s, nil
}

// exec runs sql (several statements allowed) with search_path = schema.
func (h *harness) exec(ctx context.Context, schema, sql string, args ...any) (int64, error) {
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", schema); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), tx.Commit(ctx)
}

// The backlog's events look like CreateOrder's: aggregate_id is the event's
// index, which the recorder checks off.
// created_at increases by 1 µs per event, as if each came from its own
// transaction (a single INSERT would give them all the same now()).
const eventValuesSQL = `'order', i::text, 'order.created',
  jsonb_build_object('order_id', i::text, 'customer_id', 'c' || (i % 1000), 'total', 4999),
  now() - interval '1 hour' + i * interval '1 microsecond'`

// v7ID is a time-ordered id like the UUIDv7 pgoutbox's Writer generates
// (monotonic in i, which may be negative for retained rows), built
// server-side.
const v7ID = `('00000000-0000-7000-8000-' || lpad(to_hex(i + 4294967296), 12, '0'))::uuid`

// fillOurs adds n pending events with indexes [from, from+n) to pgoutbox's
// table, in one server-side INSERT ... SELECT, then ANALYZE (autovacuum is off
// on our servers; in production it would analyze the table itself).
func (h *harness) fillOurs(ctx context.Context, schema string, from, n int) error {
	_, err := h.exec(ctx, schema, `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at)
SELECT `+v7ID+`, `+eventValuesSQL+` FROM generate_series($1::bigint, $2::bigint) i`, from, from+n-1)
	if err == nil {
		_, err = h.exec(ctx, schema, "ANALYZE outbox_events")
	}
	if err == nil {
		h.checkpoint(ctx)
	}
	return err
}

// checkpoint flushes what a fill dirtied, so the drain timed next does not
// pay for the fill's checkpoint (on this disk a big fill triggers one that
// slowed the next drain 2-3x, depending on when it struck). It needs
// superuser or pg_checkpoint; without them the drain just runs as is.
func (h *harness) checkpoint(ctx context.Context) {
	if _, err := h.pool.Exec(ctx, "CHECKPOINT"); err != nil && !h.noCheckpoint {
		h.noCheckpoint = true
		h.logf("CHECKPOINT refused (%v): drains may include a fill's checkpoint", err)
	}
}

// fillBaseline adds n pending events to the baseline's table, ids from its
// DEFAULT gen_random_uuid() (UUIDv4); with its trigger in place, each row
// sends its notification.
func (h *harness) fillBaseline(ctx context.Context, schema string, from, n int) error {
	_, err := h.exec(ctx, schema, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
SELECT `+eventValuesSQL+` FROM generate_series($1::bigint, $2::bigint) i`, from, from+n-1)
	if err == nil {
		_, err = h.exec(ctx, schema, "ANALYZE outbox_events")
	}
	if err == nil {
		h.checkpoint(ctx)
	}
	return err
}

// vacuum stands in for autovacuum (off on our servers).
func (h *harness) vacuum(ctx context.Context, schema string) error {
	_, err := h.pool.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{schema, "outbox_events"}.Sanitize())
	return err
}

// pendingCount counts rows not yet processed.
func (h *harness) pendingCount(ctx context.Context, schema string) (int64, error) {
	var n int64
	err := h.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_events"}.Sanitize()+
		" WHERE processed_at IS NULL").Scan(&n)
	return n, err
}

func (h *harness) rowCount(ctx context.Context, schema, table string) (int64, error) {
	var n int64
	err := h.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n)
	return n, err
}

// newStream creates a JetStream stream (file storage, the durable default)
// capturing <name>.>, deleted at the end of the run.
func (h *harness) newStream(ctx context.Context) (string, error) {
	h.seq++
	name := strings.ToUpper(fmt.Sprintf("%s_%d", h.prefix, h.seq))
	_, err := h.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return "", fmt.Errorf("create stream: %w", err)
	}
	h.streams = append(h.streams, name)
	if h.opt.onCreate != nil {
		h.opt.onCreate(pubNATS, name)
	}
	return name, nil
}

// streamMsgs is how many messages the stream holds (after its dedup).
func (h *harness) streamMsgs(ctx context.Context, name string) (uint64, error) {
	s, err := h.js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

func (h *harness) releaseStream(ctx context.Context, name string) {
	if h.opt.Keep {
		return
	}
	_ = h.js.DeleteStream(ctx, name)
	for i, x := range h.streams {
		if x == name {
			h.streams = append(h.streams[:i], h.streams[i+1:]...)
			break
		}
	}
}

func (h *harness) spec(design, schema, pub string) relaySpec {
	h.seq++
	return relaySpec{
		Design: design, DatabaseURL: h.opt.DatabaseURL, Schema: schema, Publisher: pub,
		NatsURL: h.opt.NatsURL, AppName: fmt.Sprintf("%s_relay_%d", h.prefix, h.seq), Timeout: h.opt.Timeout,
	}
}

// machine describes where the figures were measured.
type machine struct {
	CPUs     int
	CPUModel string
	MemGB    float64
	Postgres string
	Go       string
	Settings string
}

func (h *harness) machine(ctx context.Context) machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				m.MemGB = kb / 1024 / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	_ = h.pool.QueryRow(ctx, "SELECT version()").Scan(&m.Postgres)
	rows, err := h.pool.Query(ctx, `SELECT name || '=' || setting || COALESCE(unit, '') FROM pg_settings
		WHERE name IN ('shared_buffers','synchronous_commit','fsync','autovacuum','max_wal_size','wal_level') ORDER BY name`)
	if err == nil {
		var ss []string
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				ss = append(ss, s)
			}
		}
		rows.Close()
		m.Settings = strings.Join(ss, ", ")
	}
	return m
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile of sorted xs, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}
