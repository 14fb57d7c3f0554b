// Package rabbitmq publishes outbox events to RabbitMQ (AMQP 0-9-1) with
// publisher confirms.
//
// # Guarantees
//
// A message counts as published only when the broker acks it on a channel in
// confirm mode: for a persistent message routed to a durable queue, RabbitMQ
// acks after the message is written to disk (classic queues) or accepted by a
// quorum of replicas (quorum queues). Messages to a non-durable queue are
// acked once enqueued in memory and die with the broker.
//
// Every message is published with the mandatory flag, so a message that no
// queue is bound to receive comes back (basic.return) and fails with
// ErrUnroutable instead of being dropped silently. A nack (a queue at its
// x-max-length with x-overflow=reject-publish) fails with ErrNacked. Both
// are unavailable: a missing queue or a full one refuses every message
// alike, so the relay backs off as a whole, counts no attempt, and the
// error names the exchange, the routing key and the command that fixes it.
//
// Each AMQP message carries:
//
//   - message_id: the event id, the consumer's deduplication key
//     (at-least-once delivery means the same event can arrive twice).
//   - routing key: the RoutingKey topic template, "{event_type}" by default.
//   - type: the event type; timestamp: the event's created_at (seconds).
//   - delivery_mode 2 (persistent) and content_type application/json.
//   - headers: outbox-event-id, outbox-event-type, outbox-aggregate-type,
//     outbox-aggregate-id, outbox-created-at and the event's own headers, all
//     strings.
//   - body: the payload as the outbox table stores it.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the message
// follows the CloudEvents AMQP protocol binding, with the AMQP 0-9-1 headers
// table standing for AMQP 1.0's application properties; message_id, routing
// key, type, timestamp and delivery_mode stay as above:
//
//   - outbox.EnvelopeCloudEvents (binary content mode): body = the payload,
//     content_type = application/json (datacontenttype), headers
//     cloudEvents_specversion, cloudEvents_id, cloudEvents_source,
//     cloudEvents_type, cloudEvents_subject (aggregate id),
//     cloudEvents_time (created_at) and cloudEvents_<extension> for the
//     aggregate type and the row's headers, all strings. The binding allows
//     the prefixes cloudEvents_ and cloudEvents: and prefers the first
//     (JMS selectors cannot name the second); inbox/rabbitmqinbox reads both;
//   - outbox.EnvelopeCloudEventsStructured: body = the JSON event format,
//     content_type = application/cloudevents+json, no headers.
//
// docs/CLOUDEVENTS.md has every broker's mapping.
//
// # Connections and errors
//
// New does not connect; the first Publish (or Health) does, and the
// publisher connects again by itself whenever the connection or channel
// closes. While the broker cannot be reached, or closes the connection
// before confirming, publishes fail with errors wrapping outbox.ErrUnavailable,
// so the relay backs off without counting attempts. So do connection-level
// refusals (wrong credentials or vhost): fixing the configuration lets the
// outbox drain, where dead-lettering would not; the relay's readiness and
// Health report them meanwhile. A message larger than MaxMessageSize (set it
// to the broker's max_message_size, 128 MiB by default) fails permanently
// before it is sent; one the broker refuses for its size anyway (a lower
// server limit) fails permanently too.
//
// A channel error the broker raises for one message closes the channel: that
// message fails with the broker's error and the batch's other unconfirmed
// messages as unavailable, and the next publish opens a new channel. A
// missing exchange (404) and access refused (403) are unavailable too: they
// hit every message alike; the error names the exchange and, for 404, the
// command declaring it. While
// the broker blocks publishers (a memory or disk alarm), publishes fail as
// unavailable without being sent. A connection that goes silent is noticed
// after three heartbeats; until then publishes time out, which the relay
// reads as the broker being unavailable.
//
// # Topology
//
// Declaring exchanges, queues and bindings is the operator's job:
//
//	rabbitmqadmin declare exchange name=events type=topic durable=true
//	rabbitmqadmin declare queue name=orders durable=true arguments='{"x-queue-type":"quorum"}'
//	rabbitmqadmin declare binding source=events destination=orders routing_key='order.#'
//
// The publisher declares nothing unless Config.DeclareExchange
// (declare_exchange= in a URL) asks it to declare its exchange, opting in.
//
// # TLS and credentials
//
// amqps:// URLs connect with TLS: the system roots, or Config.TLS, or the
// URL's cacertfile (private CAs), certfile and keyfile (a client
// certificate, for brokers with ssl_options.verify = verify_peer and
// fail_if_no_peer_cert = true); server_name_indication overrides the name
// checked. auth_mechanism=external authenticates by that client certificate
// (RabbitMQ's rabbitmq_auth_mechanism_ssl plugin) instead of the URL's user
// and password.
//
// # Broker URL
//
// ParseURL and NewFromURL take the CLI's --broker URL,
//
//	amqp://user:password@host:5672/vhost?exchange=events&routing_key=orders.{event_type}
//
// with these query options:
//
//	exchange          exchange to publish to (default "", the default exchange)
//	routing_key       routing key template (default {event_type})
//	declare_exchange  declare the exchange, durable, of this kind: topic, direct, fanout, headers
//	max_message_size  largest body in bytes (default 134217728, RabbitMQ's default)
//	dial_timeout      Go duration bounding a connect (default 10s)
//	connection_name   name shown in the management UI (default pgoutbox)
//
// and amqp091's own: heartbeat (seconds), connection_timeout (milliseconds),
// channel_max, auth_mechanism, certfile, keyfile, cacertfile,
// server_name_indication. Any other option is an error. The password never
// appears in errors or logs.
//
// # Usage
//
//	pub, err := rabbitmq.New(rabbitmq.Config{
//		URL:        "amqp://guest:guest@127.0.0.1:5672/",
//		Exchange:   "events",            // declared and bound by the operator
//		RoutingKey: "{aggregate_type}.{event_type}",
//	})
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//	if err != nil {
//		return err
//	}
//	return relay.Run(ctx)
package rabbitmq
