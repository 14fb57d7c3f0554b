// Package metrics defines the relay's Prometheus collectors. Their names are
// a documented contract: dashboards and alerts are built on them.
package metrics

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is one relay's set of collectors. A nil *Metrics records nothing.
type Metrics struct {
	Published         prometheus.Counter
	Failed            *prometheus.CounterVec
	Pending           prometheus.Gauge
	BatchDuration     prometheus.Histogram
	DeadLetters       prometheus.Gauge
	DeadLettered      *prometheus.CounterVec
	PublishLag        *prometheus.HistogramVec
	BrokerUnavailable prometheus.Gauge
	DBErrors          prometheus.Counter
	Unrecorded        prometheus.Counter
	LastPublish       prometheus.Gauge
	BlockedAggregates prometheus.Gauge
	HeldEvents        prometheus.Gauge
	Scheduled         prometheus.Gauge
	NextDue           prometheus.Gauge
	OldestPendingAge  prometheus.Gauge
	Stuck             prometheus.Gauge

	// The event source (RelayConfig.Source). Replication* are set only by a
	// relay whose source is the WAL, from the slot's row in
	// pg_replication_slots every StatsInterval.
	Source               *prometheus.GaugeVec
	Streaming            prometheus.Gauge
	Fallbacks            prometheus.Counter
	ReplicationLag       prometheus.Gauge
	ReplicationRetained  prometheus.Gauge
	ReplicationSlotState *prometheus.GaugeVec
	// A partitioned table's partitions (WAL source; set by the relay
	// streaming the slot, which rotates them).
	Partitions        prometheus.Gauge
	PartitionsDropped prometheus.Counter

	wal bool
}

// New builds the collectors and registers them with reg when reg is not nil.
// constLabels are added to every series (for example the outbox table when one
// process runs relays for several tables).
//
// The replication collectors are registered only with wal (the relay's
// source is the WAL), so a table relay exports none of them.
func New(reg prometheus.Registerer, constLabels prometheus.Labels, wal bool) (*Metrics, error) {
	m := &Metrics{wal: wal,
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_events_published_total", ConstLabels: constLabels,
			Help: "Total outbox events successfully published.",
		}),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_events_failed_total", ConstLabels: constLabels,
			Help: "Total outbox publish failures by event type.",
		}, []string{"event_type"}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_events_pending", ConstLabels: constLabels,
			Help: "Current number of unprocessed outbox events (dead letters and events scheduled for later excluded).",
		}),
		BatchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_batch_duration_seconds", ConstLabels: constLabels,
			Help: "Duration of each outbox processing batch.",
			// DefBuckets plus the range up to and past the default 15s
			// publish timeout, so timed-out batches are not all in +Inf.
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 20, 30, 60},
		}),
		DeadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_dead_letters", ConstLabels: constLabels,
			Help: "Current number of dead-lettered outbox events awaiting an operator.",
		}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_events_dead_lettered_total", ConstLabels: constLabels,
			Help: "Outbox events that became dead letters, by event type.",
		}, []string{"event_type"}),
		PublishLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_publish_lag_seconds", ConstLabels: constLabels,
			Help:    "Time from the event's created_at to the broker's confirmation, by event type.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"event_type"}),
		BrokerUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_broker_unavailable", ConstLabels: constLabels,
			Help: "1 while the relay considers the broker unreachable and is backing off, else 0.",
		}),
		DBErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_database_errors_total", ConstLabels: constLabels,
			Help: "Relay batches that failed on a database error.",
		}),
		Unrecorded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_unrecorded_total", ConstLabels: constLabels,
			Help: "Events the destination confirmed whose outcome the relay could not record in the table: each stays pending and is published again, with the same event id, after a backoff.",
		}),
		LastPublish: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_last_publish_timestamp_seconds", ConstLabels: constLabels,
			Help: "Unix time of the last successful publish.",
		}),
		BlockedAggregates: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_blocked_aggregates", ConstLabels: constLabels,
			Help: "Aggregates whose later events are held back by a dead letter (ordered mode).",
		}),
		HeldEvents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_events_held", ConstLabels: constLabels,
			Help: "Events parked behind an earlier failing event of their aggregate (ordered mode).",
		}),
		Scheduled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_events_scheduled", ConstLabels: constLabels,
			Help: "Events scheduled for later delivery (Event.DeliverAt or Delay) and not yet due.",
		}),
		NextDue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_scheduled_next_due_timestamp_seconds", ConstLabels: constLabels,
			Help: "Unix time the earliest scheduled event is due; 0 when none is scheduled.",
		}),
		Stuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_stuck", ConstLabels: constLabels,
			Help: "1 while events are due and none reached the destination for RelayConfig.StuckAfter (the relay's log and /readyz say why), else 0.",
		}),
		OldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_oldest_pending_age_seconds", ConstLabels: constLabels,
			Help: "Age of the oldest claimable event (by insertion order); 0 when none is pending.",
		}),
		Source: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_source", ConstLabels: constLabels,
			Help: "1 for the source the relay reads events from now (table or wal; a WAL relay falling back reads the table), else 0.",
		}, []string{"source"}),
		Streaming: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_replication_streaming", ConstLabels: constLabels,
			Help: "1 while this relay streams the replication slot, 0 while it stands by or falls back (WAL source).",
		}),
		Fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_replication_fallbacks_total", ConstLabels: constLabels,
			Help: "Times the WAL source found its slot lost or dropped and fell back to the table.",
		}),
		ReplicationLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_replication_lag_bytes", ConstLabels: constLabels,
			Help: "WAL written since the slot's confirmed position: how far the WAL source is behind (pg_current_wal_lsn() - confirmed_flush_lsn).",
		}),
		ReplicationRetained: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_replication_retained_bytes", ConstLabels: constLabels,
			Help: "WAL the slot keeps on the server's disk (pg_current_wal_lsn() - restart_lsn).",
		}),
		ReplicationSlotState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_replication_slot_state", ConstLabels: constLabels,
			Help: "1 for the slot's current wal_status (reserved, extended, unreserved, lost) or missing, else 0.",
		}, []string{"state"}),
		Partitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_partitions", ConstLabels: constLabels,
			Help: "Partitions of a partitioned outbox table, as the relay streaming its slot last read them (0 for an unpartitioned table).",
		}),
		PartitionsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_partitions_dropped_total", ConstLabels: constLabels,
			Help: "Partitions of delivered events this relay detached and dropped.",
		}),
	}
	if reg != nil {
		for _, c := range m.collectors() {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.Published, m.Failed, m.Pending, m.BatchDuration, m.DeadLetters,
		m.DeadLettered, m.PublishLag, m.BrokerUnavailable, m.DBErrors, m.Unrecorded, m.LastPublish, m.BlockedAggregates, m.HeldEvents, m.OldestPendingAge, m.Stuck,
		m.Scheduled, m.NextDue, m.Source}
	if m.wal {
		cs = append(cs, m.Streaming, m.Fallbacks, m.ReplicationLag, m.ReplicationRetained, m.ReplicationSlotState,
			m.Partitions, m.PartitionsDropped)
	}
	return cs
}

// ObservePublished records one confirmed event.
func (m *Metrics) ObservePublished(eventType string, createdAt, ackedAt time.Time) {
	m.Published.Inc()
	m.PublishLag.WithLabelValues(Label(eventType)).Observe(ackedAt.Sub(createdAt).Seconds())
}

// Label is s as a label value: Prometheus panics on invalid UTF-8, which an
// event type read from a SQL_ASCII database (or any database through a
// connection whose client_encoding is not UTF8) may be.
func Label(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
