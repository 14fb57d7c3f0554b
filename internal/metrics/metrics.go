// Package metrics defines the relay's Prometheus collectors. Their names are
// a documented contract: dashboards and alerts are built on them.
package metrics

import (
	"time"

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
	LastPublish       prometheus.Gauge
	BlockedAggregates prometheus.Gauge
	HeldEvents        prometheus.Gauge
	Scheduled         prometheus.Gauge
	NextDue           prometheus.Gauge
	OldestPendingAge  prometheus.Gauge
}

// New builds the collectors and registers them with reg when reg is not nil.
// constLabels are added to every series (for example the outbox table when one
// process runs relays for several tables).
func New(reg prometheus.Registerer, constLabels prometheus.Labels) (*Metrics, error) {
	m := &Metrics{
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
		OldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_oldest_pending_age_seconds", ConstLabels: constLabels,
			Help: "Age of the oldest claimable event (by insertion order); 0 when none is pending.",
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
	return []prometheus.Collector{m.Published, m.Failed, m.Pending, m.BatchDuration, m.DeadLetters,
		m.DeadLettered, m.PublishLag, m.BrokerUnavailable, m.DBErrors, m.LastPublish, m.BlockedAggregates, m.HeldEvents, m.OldestPendingAge,
		m.Scheduled, m.NextDue}
}

// ObservePublished records one confirmed event.
func (m *Metrics) ObservePublished(eventType string, createdAt, ackedAt time.Time) {
	m.Published.Inc()
	m.PublishLag.WithLabelValues(eventType).Observe(ackedAt.Sub(createdAt).Seconds())
}
