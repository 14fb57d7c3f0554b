// Package pubsub publishes outbox events to Google Cloud Pub/Sub with
// cloud.google.com/go/pubsub/v2.
//
// # Contract
//
// A message counts as published when Pub/Sub answers its publish request
// with the message's server id: Pub/Sub has stored it durably, in more than
// one zone, for every subscription of the topic. PublishBatch hands every
// message to the client at once and then waits for each message's own
// result (pubsub.PublishResult); one message's failure does not fail the
// others.
//
// Each event becomes one Pub/Sub message:
//
//   - topic: the Topic template (outbox.ParseTopicTemplate), default
//     "{event_type}": a topic ID in the client's project, or a full name
//     "projects/PROJECT/topics/ID"; an ID Pub/Sub cannot accept (not 3 to
//     255 letters, digits and - _ . ~ + %, not starting with a letter, or
//     starting with "goog") fails permanently before anything is sent;
//   - data: the payload, byte for byte;
//   - attributes: outbox.Message.StandardHeaders: outbox-event-id,
//     outbox-event-type, outbox-aggregate-type, outbox-aggregate-id,
//     outbox-created-at and the row's own headers (traceparent, ...);
//   - ordering key: the aggregate id (unless Config.DisableOrdering), so a
//     subscription with message ordering enabled delivers one aggregate's
//     events in the order the relay published them.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the message
// follows the CloudEvents Pub/Sub protocol binding instead; topic and
// ordering key stay the same:
//
//   - outbox.EnvelopeCloudEvents (binary content mode): data = the payload;
//     attributes ce-specversion, ce-id, ce-source, ce-type, ce-subject
//     (aggregate id), ce-time (created_at), ce-<extension> for the
//     aggregate type and the row's headers (canonical strings, not
//     percent-encoded), and Content-Type = application/json;
//   - outbox.EnvelopeCloudEventsStructured: data = the JSON event format,
//     Content-Type = application/cloudevents+json.
//
// docs/CLOUDEVENTS.md has every broker's mapping.
//
// Pub/Sub has no deduplication on publish: after a relay retry a subscriber
// may see an event twice (as any Pub/Sub subscriber may anyway), and
// deduplicates on the outbox-event-id attribute (ce-id, or the structured
// event's id, with a CloudEvents envelope; inbox/pubsubinbox does).
//
// Pub/Sub's limits are checked before sending, and a message over one fails
// permanently: 100 attributes, attribute names of 1 to 256 bytes not
// starting with "goog", values of at most 1024 bytes, an ordering key of at
// most 1024 bytes, and MaxMessageBytes (default and most 10 MB) for the
// encoded message.
//
// # Ordering keys
//
// The client sends one ordering key's messages one request at a time, in
// order. When a request fails, the client pauses the key: its later messages
// of the batch fail without a request, so none overtakes the one that
// failed (each names the failure that held it back). Once every message of
// the key has its result, the publisher resumes the key
// (pubsub.Publisher.ResumePublish), so the relay's next batch for the
// aggregate goes out; this holds for a result that arrives after the relay
// gave up on its batch too. A message held back by such a late failure is
// unavailable: it was never sent, and the failure was most likely the
// service not answering.
//
// A request carries one ordering key, so a batch of N aggregates costs N
// requests (sent concurrently), and Pub/Sub allows 1 MB/s per ordering key.
// DisableOrdering (ordering=false in a URL) sends a batch in as few requests
// as Pub/Sub's 1000-message and 10 MB limits allow, for subscribers that do
// not need an aggregate's order.
//
// # Errors
//
//	over a Pub/Sub limit (above), invalid topic name  → outbox.Permanent
//	INVALID_ARGUMENT for the message alone (a schema
//	the message does not match, ...)                  → outbox.Permanent
//	NOT_FOUND: the topic does not exist (without
//	CreateTopics)                                     → outbox.Unavailable
//	                                                    (MissingTopicError,
//	                                                    naming the topic and
//	                                                    the gcloud command)
//	PERMISSION_DENIED, UNAUTHENTICATED (IAM,
//	credentials), RESOURCE_EXHAUSTED (quota,
//	throttling), FAILED_PRECONDITION (the topic's
//	KMS key disabled, ...)                            → outbox.Unavailable
//	UNAVAILABLE, DEADLINE_EXCEEDED, PublishTimeout
//	ran out, connection refused or reset, DNS         → outbox.Unavailable
//	held back behind an earlier event of its
//	aggregate that failed                             → that failure's class if
//	                                                    unavailable, else transient
//	anything else (INTERNAL after the client's
//	retries, ...)                                     → transient
//
// Pub/Sub judges a request as a whole: when several messages sent together
// are refused as invalid, the publisher sends each again alone, in order, so
// only the one at fault fails permanently.
//
// The client retries UNAVAILABLE, RESOURCE_EXHAUSTED, INTERNAL and the like
// itself until PublishTimeout (default 10s, below the relay's 15s). A
// message already handed to the client when the relay gives up on its batch
// may still be published after, which with the relay's own re-send produces
// a duplicate (at-least-once).
//
// # Topics
//
// Topics are the operator's to create (usually with the infrastructure's
// own tooling):
//
//	gcloud pubsub topics create order.created --project PROJECT
//	gcloud pubsub subscriptions create shipping --topic order.created --enable-message-ordering --project PROJECT
//
// A topic without a subscription accepts messages and keeps none (unless
// the topic retains messages): create the subscriptions before the relay
// publishes. The publisher creates no topic unless Config.CreateTopics
// (create_topics=true in a URL) asks it to create one a publish found
// missing, then publish again; the relay's role then also needs
// pubsub.topics.create.
//
// # Credentials
//
// The client's: Dial and NewFromURL use Application Default Credentials
// (GOOGLE_APPLICATION_CREDENTIALS naming a key file, the gcloud user, the
// attached service account on GCE, Cloud Run and GKE, workload identity
// federation). Give the relay's service account roles/pubsub.publisher on
// the topics. Credentials never come from the URL.
//
// # Usage
//
//	client, err := gpubsub.NewClient(ctx, "my-project")
//	if err != nil {
//		return err
//	}
//	pub, err := pubsub.New(pubsub.Config{Client: client, Topic: "{event_type}"})
//	if err != nil {
//		return err
//	}
//	defer pub.Close()
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// From the command line, NewFromURL takes
//
//	pubsub://my-project/{event_type}
//	pubsub://test-project/orders?emulator=127.0.0.1:8085
//
// # What was verified, and against what
//
// The tests run the real client over gRPC against pstest, the in-process
// fake that ships with the client (cloud.google.com/go/pubsub/v2/pstest),
// through a TCP proxy that cuts the connection for the outage tests. pstest
// speaks the real API: publish requests and their per-message ids, ordering
// keys, subscriptions, pull, acknowledgements and redelivery; errors are
// injected as gRPC status codes. Not verified against Google's service: the
// exact codes it returns for IAM, quota, KMS and schema failures (the
// classification follows Google's documented codes), Pub/Sub's own limits
// (pstest enforces none: the publisher's checks are what the tests see),
// real credentials and latency. Running the conformance suite against a
// real project, or the gcloud emulator, before relying on the classification
// in production is recommended.
package pubsub
