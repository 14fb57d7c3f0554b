// Package nats publishes outbox events to NATS JetStream.
//
// # Contract
//
// A message counts as published only when JetStream answers with a PubAck,
// meaning the stream stored it. Each event becomes one message:
//
//   - subject: the Subject template (outbox.ParseTopicTemplate), default
//     "{event_type}"; a rendered subject with an empty token, a wildcard or
//     white space fails permanently before anything is sent;
//   - data: the payload, byte for byte;
//   - headers: outbox.Message.StandardHeaders, plus Nats-Msg-Id = the event
//     id, so JetStream's duplicate window drops the re-sends that
//     at-least-once delivery produces.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the message
// follows the CloudEvents NATS protocol binding instead:
//
//   - outbox.EnvelopeCloudEvents (binary content mode): data = the
//     payload; one header per attribute, ce-specversion, ce-id, ce-source,
//     ce-type, ce-subject (aggregate id), ce-time (created_at),
//     ce-datacontenttype (application/json) and ce-<extension> for the
//     aggregate type and the row's headers, values percent-encoded as the
//     binding asks;
//   - outbox.EnvelopeCloudEventsStructured: data = the JSON event format,
//     Content-Type: application/cloudevents+json.
//
// Nats-Msg-Id stays the event id in every envelope. docs/CLOUDEVENTS.md
// has every broker's mapping.
//
// PublishBatch sends every message asynchronously and then collects every
// PubAck: one pipelined round per batch, one result per message.
//
// # Errors
//
//	payload over the server's max_payload or the
//	stream's max_msg_size, invalid rendered subject   → outbox.Permanent
//	not connected, connection closed or draining,
//	authorization or permission failure              → outbox.Unavailable
//	no stream captures the subject (no responders),
//	or its stream has no leader                      → outbox.Unavailable
//	                                                   (NoStreamError, naming
//	                                                   the subject and the
//	                                                   command creating a stream)
//	the stream refuses everything: full with discard
//	new (err_code 10077, "maximum messages exceeded"),
//	insufficient storage, memory or resources, account
//	limits, stream offline, JetStream unavailable    → outbox.Unavailable
//	anything else (a PubAck timeout, ...)            → transient
//
// An unavailable error makes the relay back off as a whole and count no
// attempt: a missing or full stream keeps the backlog, it does not turn it
// into dead letters.
//
// # Streams
//
// Creating streams is the operator's job:
//
//	nats stream add OUTBOX --subjects 'orders.>' --storage file --dupe-window 2m --defaults
//
// Opting in, the publisher does it: Config.EnsureStream (ensure_stream= in a
// URL) names a stream it creates, or updates to capture StreamSubjects,
// before its first publish and again after a publish found no stream. The
// EnsureStream function does the same once, for tests, demos and
// deployment scripts.
//
// The subjects default to exactly what the Subject template can render
// (StreamSubjectsFor): its literal tokens up to the first placeholder, then
// ">", since a placeholder may render dots ("order.created"):
// "nc.cli.{event_type}" claims "nc.cli.>", so a second relay on
// "nc.wal.{event_type}" gets a stream of its own. A subject an existing
// stream of any name already captures is left to that stream; the named
// stream, when it exists, gets the missing subjects added and keeps its
// other settings. Subjects that overlap another stream without being
// captured by it are an outage whose error names that stream.
//
// # Connecting
//
// New takes a connection the caller made. Dial and NewFromURL connect
// themselves, for command-line use, and own the connection (Close closes
// it). The connection retries forever in the background: an unreachable
// server makes publishes fail as unavailable, it does not fail Dial.
//
//	nats://user:pass@host:4222?subject=orders.{event_type}
//	tls://n1:4222,n2:4222?creds=/etc/nats/outbox.creds&ca=/etc/nats/ca.pem&ensure_stream=OUTBOX
//
// Credentials for production (DialConfig, or URL options): a .creds file
// (creds=, a user JWT and its seed, as nsc issues them), an nkey seed file
// (nkey=), user and password or a token in the URL, a private CA (ca=), a
// client certificate and key (cert=, key=; with tls { verify: true } on the
// server). Setting ca or cert makes the connection TLS; tls:// requires it.
// The files are checked when the publisher is made, so a typo fails at
// start rather than as an endless outage.
package nats
