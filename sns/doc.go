// Package sns publishes outbox events to Amazon SNS topics with
// aws-sdk-go-v2. SNS has no consumers of its own: it fans each message out
// to the topic's subscriptions (SQS queues, HTTP endpoints, Lambda...), and
// the consumers read those.
//
// # Contract
//
// A message counts as published when SNS lists its entry under Successful
// in the PublishBatch response: SNS has stored it durably and will deliver
// it to the subscriptions. PublishBatch sends up to 10 entries per call (and
// at most MaxMessageBytes per call, as SNS counts the batch's total),
// Concurrency calls at a time, and maps every entry's result back to its
// message; one entry's failure does not fail the others.
//
// Each event becomes one SNS message:
//
//   - topic: Config.TopicARN, a static ARN or a template over the event
//     ("arn:aws:sns:eu-west-1:123456789012:{aggregate_type}-events");
//   - message: the payload, byte for byte (SNS messages are UTF-8 text: a
//     payload that is not fails permanently);
//   - message attributes: the five standard headers outbox-event-id,
//     outbox-event-type, outbox-aggregate-type, outbox-aggregate-id and
//     outbox-created-at, each a String attribute, plus outbox-headers
//     (AttrHeaders), a String attribute holding a JSON object of every
//     header: the standard ones and the row's own. Six attributes whatever
//     the row's headers: an SQS subscription with raw message delivery
//     takes at most 10, so the row's headers are packed into one rather
//     than sent as attributes of their own (an event with many headers
//     would otherwise have to fail). SNS refuses empty attribute values, so
//     an empty standard header is left out of the attributes (it is still
//     in outbox-headers). Without raw message delivery, subscribers receive
//     SNS's JSON notification, with the attributes under MessageAttributes;
//   - FIFO topics (ARN ending in .fifo): MessageGroupId = aggregate id, so
//     an aggregate's events are delivered in order, and
//     MessageDeduplicationId = event id, so SNS drops a relay re-send
//     within its 5-minute window. The aggregate id must then be a valid
//     group id (1 to 128 printable ASCII characters), or the event fails
//     permanently. A standard topic has no dedup key: consumers deduplicate
//     on the outbox-event-id attribute.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope) the message
// carries a CloudEvent. CloudEvents has no SNS binding: the attributes
// follow the HTTP and NATS bindings' rules (ce- names, values
// percent-encoded), so one reader serves them all (inbox adapters do):
//
//   - outbox.EnvelopeCloudEvents (binary content mode): message = the payload;
//     String attributes ce-specversion, ce-id, ce-source, ce-type,
//     ce-subject (aggregate id), ce-time (created_at), ce-datacontenttype
//     (application/json), then the extensions while the 10 attributes last:
//     ce-outboxaggregatetype, ce-traceparent, ce-tracestate, then the row's
//     other headers by name. An event with more than 3 extensions loses the
//     last ones: use structured mode to carry every header;
//   - outbox.EnvelopeCloudEventsStructured: message = the JSON event format
//     (every header in it), one attribute content-type =
//     application/cloudevents+json.
//
// An SNS subscription filter policy can match ce-type. docs/CLOUDEVENTS.md has every broker's mapping.
//
// Attribute bytes count toward SNS's size limit. A message whose body plus
// attribute names, types and values exceeds MaxMessageBytes (default
// 256 KiB; raise it up to 1 MiB to match a topic's MaximumMessageSize)
// fails permanently before any request.
//
// For a FIFO topic, one aggregate's messages of a batch go in calls made one
// after another, and once one fails the later ones are not sent, so a retry
// cannot land after its successor. SNS judges the entries of one call
// independently, though: if an entry fails while a later entry of the same
// group in the same call succeeds, the retry arrives out of order. Run the
// relay in its per-aggregate ordered mode when that matters.
//
// # Errors
//
//	message over MaxMessageBytes, empty or non-UTF-8
//	payload, invalid group id, bad ARN from the template → outbox.Permanent
//	entry failed with SenderFault=true (e.g.
//	InvalidParameter)                                    → outbox.Permanent
//	NotFound: the topic does not exist                   → outbox.Unavailable
//	                                                       (MissingTopicError,
//	                                                       naming the topic and
//	                                                       the create-topic command)
//	AuthorizationError, KMS errors (KMSAccessDenied,
//	KMSDisabled, ...), Throttled, for the call or one
//	entry                                                → outbox.Unavailable
//	invalid or expired credentials, no credentials,
//	connection refused/reset, DNS failure                → outbox.Unavailable
//	timeouts, 5xx, dropped connections — when no entry
//	of the batch was accepted (outbox.ClassifyBatch)     → outbox.Unavailable
//	entry failed with SenderFault=false, anything else   → transient
//
// A missing topic, credential and permission failures and throttling are
// "unavailable" rather than permanent: they fail every event alike, and the
// relay should back off, report not ready and log rather than dead-letter
// the table. The SDK's own retryer (the Client's) retries throttling, 5xx
// and connection errors before the publisher sees them; the relay's ctx
// bounds it.
//
// # Topics
//
// Topics and their subscriptions are the operator's to create (usually with
// the infrastructure's own tooling); the publisher creates none:
//
//	aws sns create-topic --name orders
//	aws sns create-topic --name orders.fifo --attributes FifoTopic=true
//	aws sns subscribe --topic-arn arn:aws:sns:eu-west-1:123456789012:orders \
//	    --protocol sqs --notification-endpoint arn:aws:sqs:eu-west-1:123456789012:orders-shipping \
//	    --attributes RawMessageDelivery=true
//
// # Credentials
//
// Credentials come from the AWS SDK's default chain: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), web
// identity (EKS IRSA), the shared config and credentials files (AWS_PROFILE;
// SSO and assume-role profiles included), then the container (ECS task
// role, EKS Pod Identity) or EC2 instance role. The region comes from
// region=, the topic ARN, AWS_REGION or the profile. Give the relay's role
// sns:Publish and sns:GetTopicAttributes on the topic, and
// kms:GenerateDataKey and kms:Decrypt on its key when the topic is
// encrypted with a customer key. Credentials never come from the URL.
//
// # Usage
//
//	awsCfg, err := config.LoadDefaultConfig(ctx)
//	if err != nil {
//		return err
//	}
//	pub, err := sns.New(sns.Config{
//		Client:   awssns.NewFromConfig(awsCfg),
//		TopicARN: "arn:aws:sns:eu-west-1:123456789012:orders.fifo",
//	})
//	if err != nil {
//		return err
//	}
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// From the command line, NewFromURL takes
//
//	sns://?topic_arn=arn%3Aaws%3Asns%3Aeu-west-1%3A123456789012%3Aorders.fifo
//
// with credentials from the AWS default chain, never from the URL.
//
// # What was verified, and against what
//
// There is no AWS account in this project's test environment. The tests run
// the real aws-sdk-go-v2 client over HTTP against an in-process fake
// (internal/awsfake, which the benchmark runs too) that speaks the protocol
// the SDK uses for SNS (the query protocol: a form-encoded POST answered in
// XML) and enforces the SNS rules the publisher relies on, as documented in
// the SNS API reference: 10 entries per batch with distinct ids, the
// message and batch size limits, 10 attributes with valid names and
// non-empty values, MessageGroupId and MessageDeduplicationId on FIFO
// topics, FIFO deduplication, per-entry SenderFault results, NotFound.
//
// Not verified against real SNS: the exact codes and faults SNS returns for
// access, KMS, credential and throttling failures (the classification above
// follows the documented codes), SigV4 signing, delivery to subscriptions
// (raw or not), and real latency and throttling. Running the conformance
// suite against a real topic, or LocalStack, before relying on the error
// classification in production is recommended.
package sns
