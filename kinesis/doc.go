// Package kinesis publishes outbox events to an Amazon Kinesis data stream
// with aws-sdk-go-v2.
//
// # Contract
//
// A record counts as published when Kinesis returns a sequence number for it
// in the PutRecords response: Kinesis has stored it durably in its shard.
// PublishBatch sends up to 500 records per call (and at most 5 MiB per
// call), and maps every record's result back to its message by position;
// one record's failure does not fail the others.
//
// Each event becomes one record:
//
//   - stream: Config.Stream, a name or an ARN;
//
//   - partition key: the aggregate id (the event id when it is empty), so an
//     aggregate's events land in one shard, in the order they were sent. A
//     partition key is at most 256 characters: a longer aggregate id fails
//     the event permanently;
//
//   - data: a JSON envelope, since a record carries no headers of its own:
//
//     {"headers":{"outbox-aggregate-id":"42","outbox-aggregate-type":"order","outbox-created-at":"...",
//     "outbox-event-id":"0191...","outbox-event-type":"order.created","traceparent":"..."},
//     "payload":{"order_id":"42","total":12.5}}
//
// headers holds every header (outbox.Message.StandardHeaders: the standard
// ones and the row's own), payload the event's payload, its bytes as
// written. Kinesis has no dedup key: a relay re-send is a second record, and
// consumers deduplicate on headers["outbox-event-id"]. Decode reads a
// record's data back.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope, either mode) the
// data is the CloudEvents JSON event format instead,
// {"specversion":"1.0","id":...,"data":<payload>}: structured content mode,
// since CloudEvents has no Kinesis binding and a record has no headers for
// binary mode. Partition key and limits stay the same; consumers
// deduplicate on its id (docs/CLOUDEVENTS.md).
//
// A record's data plus partition key over MaxRecordBytes (default 1 MiB;
// raise it up to 10 MiB to match a stream's MaxRecordSizeInKiB) fails
// permanently before any request.
//
// A partition key's records go to one of Concurrency lanes whose calls are
// made one after another, and once one of a key's records fails its later
// ones in the batch are not sent, so a retry cannot land after its
// successor. Kinesis judges the records of one call independently, though:
// if a record fails while a later record with the same key in the same call
// succeeds, the retry arrives out of order. Run the relay in its
// per-aggregate ordered mode when that matters.
//
// # Throttling is back-pressure
//
// A record refused with ProvisionedThroughputExceededException (its shard,
// or the stream, is over its write throughput) is outbox.Unavailable: the
// relay leaves it untouched, counts no attempt and backs off as a whole, as
// for an outage, since sending less for a while is the cure and the record
// itself is fine. A single hot shard throttled while the others accept is
// back-pressure too: its records carry a one-second wait, and the relay
// retries them after it without counting an attempt (retry_after set),
// however long the shard stays hot; give the stream more shards (or
// on-demand mode) for a hot aggregate.
//
// # Errors
//
//	record over MaxRecordBytes, payload not JSON,
//	partition key over 256 characters                    → outbox.Permanent
//	ResourceNotFoundException: no such stream           → outbox.Unavailable
//	                                                       (MissingStreamError,
//	                                                       naming the stream and the
//	                                                       create-stream command)
//	ProvisionedThroughputExceededException, KMS errors,
//	AccessDeniedException, for the call or one record    → outbox.Unavailable
//	LimitExceededException, ResourceInUseException       → outbox.Unavailable
//	invalid or expired credentials, no credentials,
//	connection refused/reset, DNS failure                → outbox.Unavailable
//	timeouts, 5xx, dropped connections — when no record
//	of the batch was accepted (outbox.ClassifyBatch)     → outbox.Unavailable
//	record failed with InternalFailure, anything else    → transient
//
// # Consumers
//
// Kinesis consumers are usually built with the Kinesis Client Library (its
// leases and checkpoints in DynamoDB), Lambda's event source mapping or
// Firehose, so this module has no Kinesis inbox adapter: a small
// GetRecords loop would have to redo the KCL's shard leases, resharding and
// checkpoints. In a consumer, decode each record and run the handler
// through the inbox, checkpointing only after inbox.Handle returned:
//
//	env, err := kinesis.Decode(record.Data)
//	if err != nil {
//		return err // not an outbox record
//	}
//	msg, err := inbox.MessageFromHeaders(env.Headers, env.Payload)
//	if err != nil {
//		return err
//	}
//	_, err = ib.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx) error {
//		return apply(ctx, tx, msg.Payload)
//	})
//
// # Streams
//
// Streams are the operator's to create (usually with the infrastructure's
// own tooling); the publisher creates none:
//
//	aws kinesis create-stream --stream-name orders --stream-mode-details StreamMode=ON_DEMAND
//
// # Credentials
//
// Credentials come from the AWS SDK's default chain: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), web
// identity (EKS IRSA), the shared config and credentials files (AWS_PROFILE;
// SSO and assume-role profiles included), then the container (ECS task
// role, EKS Pod Identity) or EC2 instance role. The region comes from
// region=, the stream ARN, AWS_REGION or the profile. Give the relay's role
// kinesis:PutRecords and kinesis:DescribeStreamSummary on the stream, and
// kms:GenerateDataKey on its key when the stream is encrypted with a
// customer key. Credentials never come from the URL.
//
// # Usage
//
//	awsCfg, err := config.LoadDefaultConfig(ctx)
//	if err != nil {
//		return err
//	}
//	pub, err := kinesis.New(kinesis.Config{
//		Client: awskinesis.NewFromConfig(awsCfg),
//		Stream: "orders",
//	})
//	if err != nil {
//		return err
//	}
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// From the command line, NewFromURL takes
//
//	kinesis://?stream=orders&region=eu-west-1
//
// with credentials from the AWS default chain, never from the URL.
//
// # What was verified, and against what
//
// There is no AWS account in this project's test environment. The tests run
// the real aws-sdk-go-v2 client over HTTP against an in-process fake
// (internal/awsfake, which the benchmark runs too) that speaks the protocol
// the SDK uses for Kinesis (AWS JSON 1.1, data as base64) and enforces the
// PutRecords rules the publisher relies on, as documented in the Kinesis API
// reference: 500 records per call, the record and request size limits, the
// partition key's length, MD5 shard mapping, per-record results in request
// order, ResourceNotFoundException.
//
// Not verified against real Kinesis: the exact codes Kinesis returns for
// access, KMS, credential and throttling failures (the classification above
// follows the documented codes), SigV4 signing, real shard throughput
// limits, latency and throttling. Running the conformance suite against a
// real stream, or LocalStack, before relying on the error classification in
// production is recommended.
package kinesis
