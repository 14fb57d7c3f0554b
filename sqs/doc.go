// Package sqs publishes outbox events to Amazon SQS with aws-sdk-go-v2.
//
// # Contract
//
// A message counts as published when SQS lists its entry under Successful in
// the SendMessageBatch response: SQS has stored it redundantly. PublishBatch
// sends up to 10 entries per call (and at most MaxMessageBytes per call),
// Concurrency calls at a time, and maps every entry's result back to its
// message; one entry's failure does not fail the others.
//
// Each event becomes one SQS message:
//
//   - queue: Config.QueueURL, a static URL or a template over the event
//     ("https://sqs.eu-west-1.amazonaws.com/123456789012/{aggregate_type}-events");
//   - body: the payload, byte for byte;
//   - message attributes (SQS allows 10 per message; six are used): the
//     five standard headers outbox-event-id, outbox-event-type,
//     outbox-aggregate-type, outbox-aggregate-id and outbox-created-at, each
//     a String attribute, plus outbox-headers (AttrHeaders), a String
//     attribute holding a JSON object of every header: the standard ones and
//     the row's own. Consumers read the row's headers (traceparent, tenant,
//     ...) from outbox-headers. SQS refuses empty attribute values, so an
//     empty standard header is left out of the attributes (it is still in
//     outbox-headers);
//   - FIFO queues (URL ending in .fifo): MessageGroupId = aggregate id, so an
//     aggregate's events are delivered in order, and MessageDeduplicationId =
//     event id, so SQS drops a relay re-send within its 5-minute window.
//     The aggregate id must then be a valid group id (1 to 128 printable
//     ASCII characters), or the event fails permanently.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the message
// carries a CloudEvent. CloudEvents has no SQS binding: the attributes
// follow the HTTP and NATS bindings' rules (ce- names, values
// percent-encoded), so one reader serves them all (inbox adapters do):
//
//   - outbox.EnvelopeCloudEvents (binary content mode): body = the payload;
//     String attributes ce-specversion, ce-id, ce-source, ce-type,
//     ce-subject (aggregate id), ce-time (created_at), ce-datacontenttype
//     (application/json), then the extensions while the 10 attributes last:
//     ce-outboxaggregatetype, ce-traceparent, ce-tracestate, then the row's
//     other headers by name. An event with more than 3 extensions loses the
//     last ones: use structured mode to carry every header;
//   - outbox.EnvelopeCloudEventsStructured: body = the JSON event format
//     (every header in it), one attribute content-type =
//     application/cloudevents+json.
//
// docs/CLOUDEVENTS.md has every broker's mapping.
//
// Attribute bytes count toward SQS's size limit. A message whose body plus
// attribute names, types and values exceeds MaxMessageBytes (default
// 256 KiB, the limit every queue accepts; raise it up to 1 MiB to match a
// queue's MaximumMessageSize) fails permanently before any request.
//
// For a FIFO queue, one aggregate's messages of a batch go in calls made one
// after another, and once one fails the later ones are not sent, so a retry
// cannot land after its successor. SQS judges the entries of one call
// independently, though: if an entry fails while a later entry of the same
// group in the same call succeeds, the retry arrives out of order. Run the
// relay in its per-aggregate ordered mode when that matters; a batch then
// holds at most one event per aggregate.
//
// # Errors
//
//	message over MaxMessageBytes, empty body, invalid
//	group id, bad queue URL from the template           → outbox.Permanent
//	entry failed with SenderFault=true (e.g.
//	InvalidMessageContents)                             → outbox.Permanent
//	QueueDoesNotExist (without CreateQueues)            → outbox.Unavailable
//	                                                      (MissingQueueError,
//	                                                      naming the queue and
//	                                                      the create-queue command)
//	AccessDenied, KMS access denied or disabled,
//	throttling (RequestThrottled, ThrottlingException,
//	KmsThrottled)                                       → outbox.Unavailable
//	connection refused/reset, DNS failure, no
//	credentials, invalid or expired credentials         → outbox.Unavailable
//	timeouts, 5xx, dropped connections — when no entry
//	of the batch was accepted (outbox.ClassifyBatch)    → outbox.Unavailable
//	entry failed with SenderFault=false, anything else  → transient
//
// A missing queue, credential and permission failures and throttling are
// "unavailable" rather than permanent: they fail every event alike, and the
// relay should back off, report not ready and log rather than dead-letter
// the table. The SDK's own retryer (the Client's) retries throttling, 5xx and
// connection errors before the publisher sees them; the relay's ctx bounds
// it.
//
// # Queues
//
// Queues are the operator's to create (usually with the infrastructure's
// own tooling):
//
//	aws sqs create-queue --queue-name orders
//	aws sqs create-queue --queue-name orders.fifo --attributes FifoQueue=true
//
// The publisher creates none unless Config.CreateQueues (create_queues=true
// in a URL) asks it to create a queue a send found missing, with SQS's
// default attributes (FifoQueue=true for a ".fifo" name), opting in; the
// relay's role then also needs sqs:CreateQueue.
//
// # Credentials
//
// Credentials come from the AWS SDK's default chain, in this order: the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN),
// web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN: EKS IRSA), the
// shared config and credentials files (AWS_PROFILE; SSO and assume-role
// profiles included), then the container (ECS task role, EKS Pod Identity)
// or EC2 instance role. The region comes from region=, the queue URL's host,
// AWS_REGION or the profile. Give the relay's role sqs:SendMessage and
// sqs:GetQueueAttributes on the queue, and kms:GenerateDataKey and
// kms:Decrypt on its key when the queue is encrypted with a customer key.
// Credentials never come from the URL.
//
// # Usage
//
//	awsCfg, err := config.LoadDefaultConfig(ctx)
//	if err != nil {
//		return err
//	}
//	pub, err := sqs.New(sqs.Config{
//		Client:   awssqs.NewFromConfig(awsCfg),
//		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
//	})
//	if err != nil {
//		return err
//	}
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// From the command line, NewFromURL takes
//
//	sqs://?queue_url=https%3A%2F%2Fsqs.eu-west-1.amazonaws.com%2F123456789012%2Forders.fifo&region=eu-west-1
//
// with credentials from the AWS default chain, never from the URL.
//
// # What was verified, and against what
//
// There is no AWS account in this project's test environment. The tests run
// the real aws-sdk-go-v2 client over HTTP against an in-process fake SQS
// (internal/sqsfake, which the benchmark runs too) that speaks the protocol the SDK uses (AWS JSON 1.0
// with query-compatible errors) and enforces the SQS rules the publisher
// relies on, as documented in the SQS API reference: 10 entries per batch,
// the total and per-message size limits, 10 attributes, non-empty
// attribute values, the allowed characters, MessageGroupId on FIFO queues,
// FIFO deduplication, per-entry SenderFault results, QueueDoesNotExist.
// The SDK checks the fake's MD5 of each body, so body bytes are verified end
// to end.
//
// Not verified against real SQS: the exact error codes and faults SQS
// returns for access, KMS, credential and throttling failures (the
// classification above follows the documented codes), how SQS treats an
// oversized or malformed entry inside a batch (the publisher never sends
// one), SigV4 signing (the fake does not check signatures), the MD5 of
// message attributes (computed by the fake per the documented algorithm;
// the SDK does not check it), FIFO group locking while messages are in
// flight, and real network latency and throttling.
// Running the conformance suite against a real queue, or LocalStack, before
// relying on the error classification in production is recommended.
package sqs
