// Package mqtt publishes outbox events to an MQTT 3.1.1 broker (Mosquitto,
// EMQX, HiveMQ, VerneMQ, AWS IoT Core, ...) with
// github.com/eclipse/paho.mqtt.golang.
//
// # Contract
//
// Every message is published at QoS 1 and counts as published when the
// broker answers with its PUBACK: the broker has taken responsibility for it
// and delivers it at least once to every subscription matching its topic,
// offline persistent sessions included. PublishBatch sends every message
// on one connection without waiting, then collects every PUBACK: one
// pipelined round per batch, one result per message, in the batch's order.
//
// Each event becomes one message:
//
//   - topic: the Topic template (outbox.ParseTopicTemplate), default
//     "{event_type}"; "orders/{aggregate_type}/{event_type}" gives MQTT's
//     slash-separated levels. A rendered topic MQTT cannot publish to
//     (empty, a + or # wildcard, a NUL, a leading $) fails permanently
//     before anything is sent;
//
//   - payload: an envelope, since MQTT 3.1.1 has no headers: one JSON
//     object holding outbox.Message.StandardHeaders (outbox-event-id,
//     outbox-event-type, outbox-aggregate-type, outbox-aggregate-id,
//     outbox-created-at and the row's own headers) and the event's payload
//     byte for byte:
//
//     {"headers":{"outbox-event-id":"0192...","outbox-event-type":"order.created",...},"payload":{"order_id":"42"}}
//
//     OpenEnvelope reads it back (inbox/mqttinbox does); any JSON reader
//     can too. The payload must be JSON, as the outbox's always is.
//     With a CloudEvents envelope (outbox.RelayConfig.Envelope, either
//     mode) the payload is the CloudEvents JSON event format instead
//     ({"specversion":"1.0","id":...,"data":<payload>}): the MQTT binding
//     defines only structured content mode for MQTT 3.1.1, whose messages
//     have no user properties (docs/CLOUDEVENTS.md);
//
//   - QoS 1, not retained.
//
// MQTT has no deduplication: a subscriber may receive an event twice (QoS 1
// is at least once, and the relay re-sends after a failure), and
// deduplicates on the envelope's outbox-event-id.
//
// # MQTT 5
//
// MQTT 5 is not supported yet: it would carry the headers as user properties
// instead of an envelope, and would let a broker refuse a message with a
// reason code (no subscribers, not authorized, quota). paho.mqtt.golang
// speaks 3.1.1 only; the MQTT 5 client, github.com/eclipse/paho.golang,
// builds here at v0.23.0, but the module proxy this project uses serves it
// only from an earlier copy, not an approved release, and pgoutbox takes no
// dependency of unapproved provenance into every user's module graph. An
// MQTT 5 broker accepts 3.1.1 clients, so this package works with it as it
// is.
//
// # What a broker cannot tell
//
// In MQTT 3.1.1 a broker never refuses one message: there is no negative
// PUBACK. Three consequences the relay cannot see, so the operator must
// prevent them:
//
//   - a message to a topic no subscription matches is acknowledged and
//     dropped: create the consumers' persistent sessions (clean session off,
//     subscribed at QoS 1) before the relay publishes;
//   - a broker's ACL denying the publisher a topic acknowledges the message
//     and drops it (Mosquitto does so for 3.1.1 clients): give the relay's
//     user write access to every topic its template renders;
//   - a message over the broker's size limit makes it close the connection:
//     set MaxMessageBytes to the broker's limit (Mosquitto's max_packet_size;
//     no limit by default), so such a message fails permanently here
//     instead of looking like an outage forever.
//
// A PUBACK is not an fsync: Mosquitto with persistence true writes its
// in-memory store to disk every autosave_interval (30 minutes by default)
// and at shutdown, so a broker crash can lose acknowledged messages queued
// for offline sessions. Brokers differ; read yours.
//
// # Errors
//
//	invalid rendered topic, payload not JSON,
//	message over MaxMessageBytes                      → outbox.Permanent
//	not connected, connection lost before the PUBACK,
//	a write that timed out (WriteTimeout)             → outbox.Unavailable
//	no PUBACK before ctx's deadline                   → a timeout (the relay
//	                                                    treats a batch of them
//	                                                    as unavailable)
//
// # Connecting
//
// New makes the client from paho options (brokers, credentials, TLS, client
// id) and connects in the background: an unreachable broker makes publishes
// fail as unavailable, it does not fail New. It reconnects by itself, with
// a backoff from 100ms to 5s. It turns paho's own reconnection off: paho
// completes the tokens of the messages it sends again after a reconnection
// as if they were acknowledged, before the new PUBACK, which would mark an
// event published that the broker never confirmed; here a message whose
// connection is lost before its PUBACK fails (unavailable) and the relay
// sends it again. The session is clean: the relay needs no state on the
// broker.
//
//	mqtt://user:pass@host:1883?topic=orders/{event_type}
//	mqtts://host1:8883,host2:8883?tls_ca=/etc/mqtt/ca.pem&tls_cert=/etc/mqtt/relay.pem&tls_key=/etc/mqtt/relay-key.pem
//
// Credentials for production: a user and password in the URL (or
// ClientOptions.SetUsername/SetPassword, SetCredentialsProvider), TLS with a
// private CA (tls_ca), a client certificate (tls_cert, tls_key). The files
// are read when the publisher is made, so a typo fails at start.
//
// # Tests
//
// The tests run against the real Mosquitto on 127.0.0.1:1883 (MQTT_ADDR),
// through a TCP proxy that cuts the connection for the outage tests, each on
// a topic prefix of its own.
package mqtt
