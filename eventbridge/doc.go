// Package eventbridge publishes outbox events to an Amazon EventBridge event
// bus with aws-sdk-go-v2. EventBridge has no consumers of its own: its rules
// match events and send them to targets (SQS queues, Lambda functions, API
// destinations, other buses...).
//
// # Contract
//
// A message counts as published when EventBridge returns an event id for its
// entry in the PutEvents response. PublishBatch sends up to 10 entries per
// call (and at most 256 KiB per call), Concurrency calls at a time, and maps
// every entry's result back to its message by position; one entry's failure
// does not fail the others. EventBridge keeps no order between events.
//
// PutEvents to an event bus that does not exist succeeds, and EventBridge
// drops the events. So before publishing the publisher asks DescribeEventBus
// whether the bus exists, then again at most once per BusCheckInterval
// (1 minute) while it does: a missing bus is an outage naming the bus and
// the command that creates it, not a silent loss. A bus deleted between two
// checks still loses what is sent meanwhile. Config.SkipBusCheck turns the
// check off, for a role that cannot be granted events:DescribeEventBus.
//
// Each event becomes one EventBridge event:
//
//   - event bus: Config.EventBus, a name or an ARN (default "default");
//
//   - source: Config.Source, a template over the event (default
//     "outbox.{aggregate_type}": "outbox.order");
//
//   - detail-type: the event type;
//
//   - time: the event's created_at, when the application wrote it;
//
//   - detail: a JSON object, the envelope
//
//     {"headers":{"outbox-aggregate-id":"42","outbox-aggregate-type":"order","outbox-created-at":"...",
//     "outbox-event-id":"0191...","outbox-event-type":"order.created","traceparent":"..."},
//     "payload":{"order_id":"42","total":12.5}}
//
// headers holds every header (outbox.Message.StandardHeaders: the standard
// ones and the row's own) and payload the event's payload, whatever JSON it
// is. The envelope rather than the payload as the detail, because
// EventBridge wants the detail to be a JSON object while an outbox payload
// may be any JSON value (an array, a string), and because EventBridge
// generates the event's own id, so the outbox event id needs a place a rule
// and a target can read: detail.headers["outbox-event-id"], the consumer's
// dedup key. A rule matches the payload under detail.payload:
//
//	{"source": ["outbox.order"], "detail-type": ["order.created"], "detail": {"payload": {"total": [{"numeric": [">", 100]}]}}}
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope, either mode) the
// detail is the CloudEvents JSON event format instead,
// {"specversion":"1.0","id":...,"data":<payload>}: structured content mode,
// since CloudEvents has no EventBridge binding and an entry has no headers
// for binary mode. Source, detail-type and time stay as above; a rule
// matches the payload under detail.data, a consumer deduplicates on
// detail.id (docs/CLOUDEVENTS.md).
//
// and a consumer reads it back with Decode. The payload's bytes are in the
// detail as written; EventBridge delivers the detail to targets re-encoded,
// as JSON, not byte for byte.
//
// An entry counts 14 bytes for the time plus the bytes of source,
// detail-type and detail; one over 256 KiB (MaxEntryBytes) fails
// permanently before any request, as does a payload that is not valid
// JSON, a source that is empty, over 256 characters or starts with "aws."
// (EventBridge reserves it), and an event type over 128 characters.
//
// # Errors
//
//	entry over 256 KiB, payload not JSON, bad source or
//	detail-type                                          → outbox.Permanent
//	entry failed with MalformedDetail, InvalidArgument,
//	RedactionFailure                                     → outbox.Permanent
//	the bus does not exist (DescribeEventBus)            → outbox.Unavailable
//	                                                       (MissingBusError,
//	                                                       naming the bus and the
//	                                                       create-event-bus command)
//	AccessDeniedException, NotAuthorizedForSource,
//	NotAuthorizedForDetailType, InvalidAccountId,
//	ThrottlingException, for the call or one entry       → outbox.Unavailable
//	invalid or expired credentials, no credentials,
//	connection refused/reset, DNS failure                → outbox.Unavailable
//	timeouts, 5xx, dropped connections — when no entry
//	of the batch was accepted (outbox.ClassifyBatch)     → outbox.Unavailable
//	entry failed with InternalFailure, anything else     → transient
//
// # Event buses
//
// Buses and rules are the operator's to create (usually with the
// infrastructure's own tooling); the publisher creates none:
//
//	aws events create-event-bus --name orders
//	aws events put-rule --event-bus-name orders --name big-orders \
//	    --event-pattern '{"source":["outbox.order"],"detail":{"payload":{"total":[{"numeric":[">",100]}]}}}'
//
// # Credentials
//
// Credentials come from the AWS SDK's default chain: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), web
// identity (EKS IRSA), the shared config and credentials files (AWS_PROFILE;
// SSO and assume-role profiles included), then the container (ECS task
// role, EKS Pod Identity) or EC2 instance role. The region comes from
// region=, the bus ARN, AWS_REGION or the profile. Give the relay's role
// events:PutEvents and events:DescribeEventBus on the bus. Credentials
// never come from the URL.
//
// # Usage
//
//	awsCfg, err := config.LoadDefaultConfig(ctx)
//	if err != nil {
//		return err
//	}
//	pub, err := eventbridge.New(eventbridge.Config{
//		Client:   awseventbridge.NewFromConfig(awsCfg),
//		EventBus: "orders",
//		Source:   "com.example.orders",
//	})
//	if err != nil {
//		return err
//	}
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// From the command line, NewFromURL takes
//
//	eventbridge://?bus=orders&source=com.example.orders&region=eu-west-1
//
// with credentials from the AWS default chain, never from the URL.
//
// # What was verified, and against what
//
// There is no AWS account in this project's test environment. The tests run
// the real aws-sdk-go-v2 client over HTTP against an in-process fake
// (internal/awsfake, which the benchmark runs too) that speaks the protocol
// the SDK uses for EventBridge (AWS JSON 1.1) and enforces the PutEvents
// rules the publisher relies on, as documented in the EventBridge API
// reference and user guide: 10 entries per call, the entry size as the
// user guide counts it, a JSON-object detail, per-entry results in request
// order, and the silent drop for a missing bus.
//
// Not verified against real EventBridge: the exact codes EventBridge
// returns for access, credential and throttling failures (the
// classification above follows the documented codes), whether it applies
// the 256 KiB to each entry or to a call's entries together (the publisher
// respects both), SigV4 signing, rule matching and delivery to targets,
// and real latency and throttling. Running the conformance suite against a
// real bus, or LocalStack, before relying on the error classification in
// production is recommended.
package eventbridge
