// Package redis publishes outbox events to Redis Streams with XADD.
//
// # Durability: read this first
//
// Redis answers XADD once the entry is in memory. Whether it survives a crash
// depends on the server's persistence, not on this package:
//
//   - appendonly yes with appendfsync always: the entry is on disk before
//     Redis answers. The only setting under which an acknowledged event
//     survives a Redis crash.
//   - appendonly yes with appendfsync everysec (Redis's AOF default): up to
//     about a second of acknowledged entries can be lost.
//   - no AOF (RDB snapshots only, or no persistence, as on a cache or a test
//     server): everything since the last snapshot, or everything, is lost.
//
// Replication is asynchronous too: after a failover the new primary may lack
// entries the old one acknowledged. Config.WaitReplicas makes each batch wait
// for replicas (WAIT) before it counts as published, which narrows that
// window but still does not fsync.
//
// The relay marks an event processed as soon as Redis answers, and never
// sends it again: an acknowledged entry that Redis then loses is lost for
// good. Use Redis Streams for the outbox only with appendfsync always, or
// when losing recent events on a Redis crash is acceptable.
//
// # Stream entries
//
// Each event becomes one entry (auto-generated entry id) in the stream the
// Stream topic template names ("{event_type}" by default), with fields:
//
//	id              the event id: consumers deduplicate on it (at-least-once)
//	event_type      aggregate_type   aggregate_id
//	created_at      RFC 3339 with nanoseconds, UTC
//	payload         the payload as the outbox table stores it
//	h:<name>        one field per header: the standard outbox-* headers
//	                (outbox-event-id, outbox-event-type, ...) and the event's own
//
// Headers are separate h:-prefixed fields rather than one JSON field so that
// consumers (and redis-cli) read them without decoding, and no header name
// can collide with the fixed fields.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the entry holds
// a CloudEvent instead. CloudEvents has no Redis binding; the entry follows
// the NATS binding's rules, fields standing for headers, so a consumer reads
// both alike (inbox/redisinbox does):
//
//	outbox.EnvelopeCloudEvents (binary content mode):
//	ce-specversion  ce-id  ce-source  ce-type  ce-subject (aggregate id)
//	ce-time (created_at)  ce-datacontenttype (application/json)
//	ce-<extension>  the aggregate type and the row's headers; values
//	                percent-encoded as the NATS binding asks
//	payload         the payload
//
//	outbox.EnvelopeCloudEventsStructured:
//	content-type    application/cloudevents+json
//	payload         the JSON event format
//
// docs/CLOUDEVENTS.md has every broker's mapping.
//
// Config.MaxLen trims each stream to about that many entries on every XADD
// (MAXLEN ~). By default XADD creates a missing stream; Config.RequireStream
// makes a missing stream an outage (ErrNoStream, unavailable, naming the
// stream and the command creating it) for deployments that create streams and
// consumer groups up front:
//
//	redis-cli XGROUP CREATE orders consumers $ MKSTREAM
//
// # Errors
//
// A batch is one pipelined round trip with a result per message. Connection
// failures, and replies meaning Redis refuses every write for now (LOADING,
// OOM under maxmemory with noeviction, READONLY, MASTERDOWN, NOAUTH,
// WRONGPASS, NOPERM from an ACL, ...), wrap outbox.ErrUnavailable: the relay
// backs off and counts no attempt. A reply rejecting the entry itself
// (WRONGTYPE: the key holds another type; other ERR replies) and a payload
// over MaxValueSize (Redis's proto-max-bulk-len, 512 MiB by default) are
// permanent.
//
// go-redis retries a pipeline that failed on a network error (MaxRetries,
// 3 by default), re-sending entries that may already have been added: with
// a client of your own, consider MaxRetries: -1 and let the relay retry.
// NewFromURL does that unless the URL sets max_retries.
//
// # Broker URL
//
// ParseURL and NewFromURL take the CLI's --broker URL,
//
//	redis://user:password@host:6379/0?stream=events.{aggregate_type}&maxlen=100000
//
// with these query options:
//
//	stream          stream name template (default {event_type})
//	maxlen          trim each stream to about this many entries (default 0: never)
//	max_value_size  largest payload in bytes (default 536870912, Redis's default)
//	require_stream  true: fail instead of creating a missing stream
//	wait_replicas   replicas that must acknowledge each batch (WAIT; default 0)
//	wait_timeout    Go duration for WAIT (default 1s)
//	tls_ca          rediss:// only: PEM file of private CAs
//	tls_cert        rediss:// only: client certificate (PEM), with tls_key
//	tls_key         rediss:// only: the client certificate's key
//
// and go-redis's own (dial_timeout, read_timeout, write_timeout, pool_size,
// max_retries, client_name, protocol, ...; rediss:// for TLS, unix:// for a
// socket). Any other option is an error. The password never appears in
// errors. An ACL user and its password go in the user info:
// rediss://outbox:PASSWORD@redis.internal:6380/0?tls_ca=/etc/redis/ca.pem.
//
// # Usage
//
//	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
//	defer client.Close()
//	pub, err := redis.New(client, redis.Config{Stream: "events.{aggregate_type}", MaxLen: 1_000_000})
//	if err != nil {
//		return err
//	}
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//	if err != nil {
//		return err
//	}
//	return relay.Run(ctx)
package redis
