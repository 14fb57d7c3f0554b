// Package kafka publishes outbox events to Apache Kafka (or any broker
// speaking its protocol: Redpanda, WarpStream, MSK, ...) with franz-go.
//
// # Contract
//
// A message counts as published only when the partition leader answers a
// produce request with acks=all, that is once every in-sync replica has the
// record. The producer is idempotent (franz-go's default), so the client's
// own retries never write a record twice; New refuses ClientOpts that lower
// acks, disable idempotence, allow cancelling in-flight idempotent records,
// make the client transactional or force a default topic.
//
// Each event becomes one record:
//
//   - topic: the Topic template (outbox.ParseTopicTemplate), default
//     "{event_type}"; a rendered name Kafka cannot accept (a space, more
//     than 249 characters) fails permanently before anything is sent;
//   - key: the aggregate id, so one aggregate's events land on one
//     partition, in the order the relay publishes them;
//   - value: the payload, byte for byte;
//   - headers: outbox.Message.StandardHeaders (outbox-event-id,
//     outbox-event-type, outbox-aggregate-type, outbox-aggregate-id,
//     outbox-created-at, plus the row's own headers), sorted by name;
//   - timestamp: the produce time (the event's creation time is in the
//     outbox-created-at header), so topic retention is counted from when
//     the record reached Kafka.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the record
// follows the CloudEvents Kafka protocol binding instead; topic and key stay
// the same:
//
//   - outbox.EnvelopeCloudEvents (binary content mode): value = the
//     payload; headers ce_specversion, ce_id, ce_source, ce_type,
//     ce_subject (aggregate id), ce_time (created_at), ce_<extension> for
//     the aggregate type (ce_outboxaggregatetype) and the row's headers,
//     and content-type = application/json;
//   - outbox.EnvelopeCloudEventsStructured: value = the JSON event format,
//     content-type = application/cloudevents+json.
//
// docs/CLOUDEVENTS.md has every broker's mapping.
//
// Kafka has no broker-side deduplication across produce calls: after a relay
// retry a consumer may see an event twice, and deduplicates on the
// outbox-event-id header (ce_id, or the structured event's id, with a
// CloudEvents envelope).
//
// PublishBatch produces every message asynchronously and then waits for every
// acknowledgement, returning one result per message; a failure of one
// record does not fail the others.
//
// # Errors
//
//	message too large (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE),
//	invalid topic, invalid record, policy violation   → outbox.Permanent
//	unknown topic (after the client's metadata
//	retries)                                          → outbox.Unavailable
//	                                                    (MissingTopicError,
//	                                                    naming the topic and
//	                                                    the command creating it)
//	topic or cluster authorization failure, SASL or
//	TLS failure, NOT_ENOUGH_REPLICAS, not leader, no
//	leader, broker not available, storage error,
//	throttling quota                                  → outbox.Unavailable
//	dial refused or reset, DNS failure, client closed → outbox.Unavailable
//	delivery or request timeout, ctx deadline,
//	dropped connection                                → outbox.Unavailable
//	anything else (retriable Kafka errors once
//	franz-go gave up, a cancelled ctx)                → transient
//
// A record that times out is unavailable even when other records of the
// batch were acknowledged: Kafka names what is wrong with a record
// explicitly, so a record without a verdict is stuck behind its partition's
// leader (being moved, or recovering after an outage), and counting an
// attempt for it would dead-letter healthy events during a partial outage.
// The relay then backs off as a whole while those partitions recover.
//
// Refusals that hit every record alike (credentials, ACLs, too few in-sync
// replicas, a missing topic) count as unavailable rather than permanent:
// dead-lettering the whole table over a rotated password or a topic not yet
// created would be worse than a relay that backs off, reports not ready and
// logs the reason.
//
// # Topics
//
// Topics are the operator's to create:
//
//	kafka-topics.sh --bootstrap-server kafka-1:9092 --create --topic order.created \
//		--partitions 6 --replication-factor 3 --config min.insync.replicas=2
//
// The client never asks brokers to auto-create a topic. Opting in,
// Config.CreateTopics (create_topics=true in a URL) makes the publisher
// create a topic a record was refused for as unknown, with TopicPartitions
// and TopicReplicationFactor (default: the brokers' defaults), and produce
// the refused records again.
//
// # Credentials
//
// Through ClientOpts (kgo.SASL, kgo.DialTLSConfig), or from a URL: sasl=plain,
// scram-sha-256 or scram-sha-512 with the user in the URL's user info and the
// password there too or in the environment variable sasl_password_env names;
// tls=true for TLS with the system roots, tls_ca for private CAs, tls_cert
// and tls_key for a client certificate (mutual TLS).
//
// # Azure Event Hubs
//
// Event Hubs (Standard tier and above) speaks the Kafka protocol on port
// 9093 of its namespace: TLS, SASL PLAIN, the user "$ConnectionString" and the
// namespace's (or one event hub's) connection string as the password. An
// event hub is a topic. Keep the connection string out of the URL:
//
//	export EVENTHUBS_CONNECTION_STRING='Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=outbox;SharedAccessKey=...'
//	outbox relay --broker 'kafka://$ConnectionString@NAMESPACE.servicebus.windows.net:9093?tls=true&sasl=plain&sasl_password_env=EVENTHUBS_CONNECTION_STRING' --topic orders
//
// (in a URL's password the connection string would need percent-encoding:
// its '/', ';' and '=' are URL delimiters). Give the shared access policy the
// Send claim. Create the event hub with Azure's tooling (az eventhubs
// eventhub create --resource-group RG --namespace-name NAMESPACE --name
// orders --partition-count 4); one that does not exist is a missing topic,
// an outage naming it. A wrong or revoked connection string fails SASL for
// every record: an outage, never a dead letter. Event Hubs accepts messages
// up to 1 MB (Standard), so Kafka's default MaxMessageBytes fits. This path
// is tested against kfake with SASL PLAIN over TLS, not against Azure.
//
// # Timeouts
//
// franz-go retries internally. DeliveryTimeout (default 10s) bounds how long
// a record may wait, and should stay below the relay's PublishTimeout
// (default 15s) so that a dead cluster fails records with a classified error.
// A record already written to a connection that then dies cannot be failed
// safely by an idempotent producer (the broker may have stored it), so the
// client keeps it and PublishBatch returns at ctx's deadline instead; the
// relay then treats the batch as unavailable. Such records stay buffered in
// the client and are delivered when the cluster returns, which together with
// the relay's own re-send produces duplicates (at-least-once).
//
// Kafka checks max.message.bytes against the compressed batch, and rejects
// the whole batch when it is too large. Set MaxMessageBytes to your topics'
// max.message.bytes when it is below Kafka's default: franz-go then refuses
// an oversized record alone, by its uncompressed size, and never builds a
// batch the broker would refuse.
//
// # Usage
//
//	pub, err := kafka.New(kafka.Config{
//		Brokers: []string{"kafka-1:9092", "kafka-2:9092"},
//		Topic:   "outbox.{aggregate_type}",
//		ClientOpts: []kgo.Opt{
//			kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}),
//			kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()),
//		},
//	})
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// From the command line, NewFromURL takes
//
//	kafka://user:pass@broker1:9092,broker2:9092?topic={event_type}&sasl=scram-sha-512&tls=true
//	kafka://$ConnectionString@NAMESPACE.servicebus.windows.net:9093?tls=true&sasl=plain&sasl_password_env=EVENTHUBS_CONNECTION_STRING
//
// # Tests
//
// The tests run against kfake, franz-go's in-process Kafka, which speaks the
// real wire protocol on a loopback port: produce, metadata, idempotent
// producer ids, size limits and the consumer that reads records back are all
// real protocol exchanges. Replication (acks=all waiting for followers) is
// not exercised, since kfake has no replicas.
package kafka
