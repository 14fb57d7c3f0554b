package kinesis

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsurl"
	"github.com/pgoutbox/outbox/internal/envelope"
)

// Limits and defaults.
const (
	// DefaultMaxRecordBytes is a stream's default maximum record size
	// (1 MiB), data plus partition key.
	DefaultMaxRecordBytes = 1 << 20
	// MaxRecordBytesLimit is the largest maximum record size a stream can
	// be given (10 MiB, MaxRecordSizeInKiB 10240).
	MaxRecordBytesLimit = 10 << 20
	// DefaultConcurrency is how many PutRecords calls one relay batch
	// keeps in flight, each for its own share of the partition keys.
	DefaultConcurrency = 4
	// maxRecords is Kinesis's limit on records per PutRecords call.
	maxRecords = 500
	// maxCallBytes is what one call carries at most, unless a single
	// record is larger: 5 MiB, the request limit streams had before the
	// 10 MiB records, which every stream accepts.
	maxCallBytes = 5 << 20
	// maxKeyChars is Kinesis's limit on a partition key.
	maxKeyChars = 256
)

// API is the part of *kinesis.Client the publisher uses; *kinesis.Client
// implements it.
type API interface {
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

// Config configures a Publisher. Zero values mean the documented defaults;
// New rejects invalid values with an *outbox.ConfigError naming the field.
type Config struct {
	// Client sends the requests; usually kinesis.NewFromConfig(awsCfg). Its
	// retryer, credentials, region and endpoint are the caller's. Required.
	Client API
	// Stream is the data stream's name or ARN. Required.
	Stream string
	// MaxRecordBytes is the largest record sent, data (the envelope) plus
	// partition key, as Kinesis counts. Larger ones fail permanently
	// without a request; at most 10 MiB (set it to the stream's
	// MaxRecordSizeInKiB × 1024). Defaults to DefaultMaxRecordBytes (1 MiB).
	MaxRecordBytes int
	// Concurrency is how many PutRecords calls one relay batch keeps in
	// flight; a partition key's records always go in the same sequence of
	// calls. Defaults to DefaultConcurrency (4).
	Concurrency int
}

// Publisher is an outbox.BatchPublisher and outbox.HealthChecker for Amazon
// Kinesis Data Streams. It is safe for concurrent use.
type Publisher struct {
	api         API
	stream      string
	arn         bool // stream is an ARN
	maxBytes    int
	concurrency int
}

var (
	_ outbox.BatchPublisher = (*Publisher)(nil)
	_ outbox.HealthChecker  = (*Publisher)(nil)
	_ outbox.Describer      = (*Publisher)(nil)
)

// New validates cfg and returns a Publisher. It sends no request.
func New(cfg Config) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, bad("Client", "must not be nil")
	}
	if c, ok := cfg.Client.(*kinesis.Client); ok && c.Options().Region == "" {
		// The SDK would fail every request (requests are signed for a
		// region), as a transient error: say it now.
		return nil, bad("Client", "has no region (set AWS_REGION, the profile's region, or kinesis.Options.Region)")
	}
	p := &Publisher{api: cfg.Client, stream: cfg.Stream}
	switch {
	case cfg.Stream == "":
		return nil, bad("Stream", "required")
	case strings.HasPrefix(cfg.Stream, "arn:"):
		a, err := awsurl.ParseARN(cfg.Stream, "kinesis")
		if err != nil || !strings.HasPrefix(a.Resource, "stream/") {
			return nil, bad("Stream", "%q is not a stream ARN (want arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)", cfg.Stream)
		}
		p.arn = true
	case len(cfg.Stream) > 128 || strings.ContainsFunc(cfg.Stream, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}):
		return nil, bad("Stream", "%q is not a stream name (1 to 128 of a-z, A-Z, 0-9, _ . -)", cfg.Stream)
	}
	cfg.MaxRecordBytes = cmp.Or(cfg.MaxRecordBytes, DefaultMaxRecordBytes)
	if cfg.MaxRecordBytes < 1024 || cfg.MaxRecordBytes > MaxRecordBytesLimit {
		return nil, bad("MaxRecordBytes", "%d: must be between 1024 and %d", cfg.MaxRecordBytes, MaxRecordBytesLimit)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	if cfg.Concurrency < 1 || cfg.Concurrency > 100 {
		return nil, bad("Concurrency", "%d: must be between 1 and 100", cfg.Concurrency)
	}
	p.maxBytes, p.concurrency = cfg.MaxRecordBytes, cfg.Concurrency
	return p, nil
}

// bad returns the *outbox.ConfigError for field of Config.
func bad(field, format string, args ...any) error {
	return &outbox.ConfigError{Config: "kinesis.Config", Field: field, Err: fmt.Errorf(format, args...)}
}

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "aws_kinesis" }

// Destination implements outbox.Describer: the stream's name.
func (p *Publisher) Destination(*outbox.Message) string { return streamName(p.stream) }

// streamName returns NAME from a name or arn:aws:kinesis:REGION:ACCOUNT:stream/NAME.
func streamName(s string) string {
	if i := strings.LastIndex(s, ":stream/"); i >= 0 {
		return s[i+len(":stream/"):]
	}
	return s
}

// Health asks Kinesis for the stream's summary: it must exist and be ACTIVE
// or UPDATING (both take records).
func (p *Publisher) Health(ctx context.Context) error {
	in := &kinesis.DescribeStreamSummaryInput{}
	if p.arn {
		in.StreamARN = aws.String(p.stream)
	} else {
		in.StreamName = aws.String(p.stream)
	}
	out, err := p.api.DescribeStreamSummary(ctx, in)
	if err != nil {
		return classifyCall(fmt.Errorf("kinesis: DescribeStreamSummary: %w", err), p.stream)
	}
	if s := out.StreamDescriptionSummary; s != nil && s.StreamStatus != types.StreamStatusActive && s.StreamStatus != types.StreamStatusUpdating {
		return fmt.Errorf("kinesis: stream %s is %s", p.stream, s.StreamStatus)
	}
	return nil
}

// Publish sends msg and waits for Kinesis to accept it.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	return p.PublishBatch(ctx, []*outbox.Message{msg})[0]
}

// Envelope is a decoded record: the event's headers and payload.
type Envelope = envelope.Envelope

// Decode reads the data of a record the publisher sent, giving back the
// outbox event's headers (Headers["outbox-event-id"] is the inbox's dedup
// key) and its payload, byte for byte.
func Decode(data []byte) (Envelope, error) { return envelope.Decode(data) }

// PartitionKey returns msg's partition key: the aggregate id, or the event
// id when the aggregate id is empty.
func PartitionKey(msg *outbox.Message) string {
	if msg.AggregateID != "" {
		return msg.AggregateID
	}
	return msg.ID.String()
}

// Record returns the PutRecords entry msg becomes and its size as Kinesis
// counts it.
func (p *Publisher) Record(msg *outbox.Message) (types.PutRecordsRequestEntry, int, error) {
	return p.record(msg)
}

func (p *Publisher) record(msg *outbox.Message) (types.PutRecordsRequestEntry, int, error) {
	key := PartitionKey(msg)
	if n := utf8.RuneCountInString(key); n > maxKeyChars {
		return types.PutRecordsRequestEntry{}, 0, fmt.Errorf("aggregate id as partition key: %d characters; Kinesis wants at most %d", n, maxKeyChars)
	}
	data, err := envelope.Body(msg)
	if err != nil {
		return types.PutRecordsRequestEntry{}, 0, fmt.Errorf("record data: %w", err)
	}
	e := types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(key)}
	size := len(data) + len(key)
	if size > p.maxBytes {
		return e, size, fmt.Errorf("record of %d bytes (payload %d plus the envelope and partition key) exceeds the limit of %d bytes", size, len(msg.Payload), p.maxBytes)
	}
	return e, size, nil
}

// entry is one record on its way: its index in the caller's batch.
type entry struct {
	i    int
	key  string
	size int
	e    types.PutRecordsRequestEntry
}

// PublishBatch sends the messages in PutRecords calls of at most 500
// records (and at most 5 MiB), and maps every record's result back to its
// message. A partition key's records go to one of Concurrency lanes, whose
// calls are made one after another; once one of a key's records fails, its
// later ones in the batch are not sent (they fail with the same class), so a
// retry cannot land after its successor.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	lanes := make([][]entry, p.concurrency)
	for i, msg := range msgs {
		e, size, err := p.record(msg)
		if err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("kinesis: stream %s: %w", p.stream, err))
			continue
		}
		key := aws.ToString(e.PartitionKey)
		h := fnv.New32a()
		h.Write([]byte(key))
		n := h.Sum32() % uint32(len(lanes))
		lanes[n] = append(lanes[n], entry{i: i, key: key, size: size, e: e})
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		if len(lane) == 0 {
			continue
		}
		wg.Go(func() {
			failed := map[string]error{} // partition key -> the failure that stops it
			for _, c := range chunk(lane) {
				p.send(ctx, c, failed, errs) // each lane writes its own entries' errs
			}
		})
	}
	wg.Wait()
	return outbox.ClassifyBatch(errs, serviceDown)
}

// chunk splits entries, in order, into calls of at most 500 records and
// 5 MiB together (a larger record goes alone).
func chunk(entries []entry) [][]entry {
	var out [][]entry
	var cur []entry
	bytes := 0
	for _, e := range entries {
		if len(cur) == maxRecords || (len(cur) > 0 && bytes+e.size > maxCallBytes) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, e)
		bytes += e.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// send makes one PutRecords call, leaving out the records of keys that
// already failed in this lane, and records new key failures.
func (p *Publisher) send(ctx context.Context, c []entry, failed map[string]error, errs []error) {
	var sent []entry
	for _, e := range c {
		if prev, ok := failed[e.key]; ok {
			errs[e.i] = blocked(e.key, prev)
			continue
		}
		sent = append(sent, e)
	}
	if len(sent) == 0 {
		return
	}
	fail := func(e entry, err error) {
		errs[e.i] = err
		failed[e.key] = err
	}
	if err := ctx.Err(); err != nil {
		for _, e := range sent {
			fail(e, fmt.Errorf("kinesis: not sent: %w", err))
		}
		return
	}
	in := &kinesis.PutRecordsInput{Records: make([]types.PutRecordsRequestEntry, len(sent))}
	if p.arn {
		in.StreamARN = aws.String(p.stream)
	} else {
		in.StreamName = aws.String(p.stream)
	}
	for k, e := range sent {
		in.Records[k] = e.e
	}
	resp, err := p.api.PutRecords(ctx, in)
	if err != nil {
		err = classifyCall(fmt.Errorf("kinesis: PutRecords to %s: %w", p.stream, err), p.stream)
		for _, e := range sent {
			fail(e, err)
		}
		return
	}
	if len(resp.Records) != len(sent) {
		// Results correspond to records by position only: with a count
		// that differs, none can be trusted.
		for _, e := range sent {
			fail(e, fmt.Errorf("kinesis: PutRecords to %s: %d results for %d records", p.stream, len(resp.Records), len(sent)))
		}
		return
	}
	for k, r := range resp.Records {
		switch {
		case r.ErrorCode != nil:
			fail(sent[k], classifyRecord(p.stream, aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage)))
		case r.SequenceNumber == nil:
			fail(sent[k], fmt.Errorf("kinesis: PutRecords to %s: record %d has neither a sequence number nor an error", p.stream, k))
		}
	}
}
