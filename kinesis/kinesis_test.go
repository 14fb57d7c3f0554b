package kinesis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsfake"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/kinesis"
	"github.com/pgoutbox/outbox/publishertest"
)

// env is one test's Kinesis: the fake (internal/awsfake), reached by the
// publisher through a TCP proxy the test can cut, and an admin client that
// bypasses the proxy.
type env struct {
	t      *testing.T
	fake   *awsfake.Server
	proxy  *tcpproxy.Proxy
	client *awskinesis.Client // through the proxy
	admin  *awskinesis.Client // straight to the fake
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := awsfake.Start()
	t.Cleanup(f.Close)
	p := tcpproxy.Start(t, f.Addr())
	return &env{t: t, fake: f, proxy: p, client: newClient("http://" + p.Addr()), admin: newClient(f.URL())}
}

// newClient is an SDK client as an application builds one, with static
// test credentials and retries spaced for a test.
func newClient(endpoint string) *awskinesis.Client {
	return awskinesis.New(awskinesis.Options{
		Region:       awsfake.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxBackoff = 200 * time.Millisecond
		}),
	})
}

func (e *env) createStream(name string, shards int32) string {
	e.t.Helper()
	if _, err := e.admin.CreateStream(timeout(e.t, 10*time.Second), &awskinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		e.t.Fatalf("CreateStream %s: %v", name, err)
	}
	return name
}

func (e *env) publisher(cfg kinesis.Config) *kinesis.Publisher {
	e.t.Helper()
	if cfg.Client == nil {
		cfg.Client = e.client
	}
	p, err := kinesis.New(cfg)
	if err != nil {
		e.t.Fatalf("kinesis.New: %v", err)
	}
	return p
}

type received struct {
	publishertest.Received
	Record awsfake.Record
}

// read waits until the stream holds at least n records or ctx ends, and
// returns them all, decoded as a consumer decodes them.
func (e *env) read(ctx context.Context, stream string, n int) ([]received, error) {
	err := e.fake.Wait(ctx, func() bool { return len(e.fake.Records(stream)) >= n })
	var out []received
	for _, r := range e.fake.Records(stream) {
		env, derr := kinesis.Decode(r.Data)
		if derr != nil && !bytes.Contains(r.Data, []byte(`"specversion"`)) { // a CloudEvent is no envelope
			return out, fmt.Errorf("record %s: %w", r.SequenceNumber, derr)
		}
		out = append(out, received{Received: publishertest.Received{Topic: stream, Key: r.PartitionKey, Headers: env.Headers, Payload: env.Payload, Body: r.Data}, Record: r})
	}
	return out, err
}

func (e *env) reader(stream string) func(context.Context, int) ([]publishertest.Received, error) {
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		got, err := e.read(ctx, stream, n)
		out := make([]publishertest.Received, len(got))
		for i, g := range got {
			out[i] = g.Received
		}
		return out, err
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func throttle(awsfake.Entry) *awsfake.EntryFault {
	return &awsfake.EntryFault{Code: "ProvisionedThroughputExceededException"}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		e := newEnv(t)
		stream := e.createStream("orders", 2)
		return &publishertest.Broker{
			Publisher:      e.publisher(kinesis.Config{Stream: stream}),
			Unroutable:     e.publisher(kinesis.Config{Stream: "missing"}),
			UnroutableName: "aws kinesis create-stream --stream-name missing",
			RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
				// Every record over its shard's throughput.
				e.fake.SetFaults(awsfake.Faults{Entry: throttle})
				return e.publisher(kinesis.Config{Stream: stream}), func() { e.fake.SetFaults(awsfake.Faults{}) }
			},
			MaxPayload: kinesis.DefaultMaxRecordBytes + 1,
			TopicOf:    func(*outbox.Message) string { return stream },
			KeyOf:      kinesis.PartitionKey,
			Read:       e.reader(stream),
			Disconnect: func(t *testing.T) func() {
				e.proxy.Cut()
				return e.proxy.Restore
			},
			CloudEvents: &publishertest.CloudEvents{}, // structured mode only
		}
	})
}

func message(agg string, i int) *outbox.Message {
	return publishertest.NewMessage(agg, fmt.Sprintf(`{"agg":%q,"i":%d}`, agg, i))
}

func TestBatchesOf500AndByteLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stream := e.createStream("s", 4)
	p := e.publisher(kinesis.Config{Stream: stream, Concurrency: 1})
	var msgs []*outbox.Message
	for i := range 1200 {
		msgs = append(msgs, message(fmt.Sprint("agg-", i%7), i))
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if n := e.fake.Calls("kinesis.PutRecords"); n != 3 {
		t.Errorf("1200 records took %d PutRecords calls, want 3", n)
	}
	// Records of 1,000,000 bytes: five per call under 5 MiB.
	big := make([]*outbox.Message, 6)
	for i := range big {
		big[i] = publishertest.NewMessage("b", string(publishertest.JSONOfSize(1_000_000)))
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), big) {
		if err != nil {
			t.Fatalf("big record %d: %v", i, err)
		}
	}
	if n := e.fake.Calls("kinesis.PutRecords") - 3; n != 2 {
		t.Errorf("six 1 MB records took %d calls, want 2 (at most 5 MiB per call)", n)
	}
	got, err := e.read(timeout(t, 10*time.Second), stream, 1206)
	if err != nil || len(got) != 1206 {
		t.Fatalf("read %d of 1206: %v", len(got), err)
	}
	// An aggregate's records are in one shard, in the order published.
	shard, last := map[string]string{}, map[string]string{}
	for _, g := range got {
		if s, ok := shard[g.Key]; ok && s != g.Record.ShardID {
			t.Fatalf("key %s in shards %s and %s", g.Key, s, g.Record.ShardID)
		}
		shard[g.Key] = g.Record.ShardID
		if id := g.Headers[outbox.HeaderEventID]; id <= last[g.Key] { // UUIDv7: increasing
			t.Fatalf("key %s: event %s stored after %s", g.Key, id, last[g.Key])
		}
		last[g.Key] = g.Headers[outbox.HeaderEventID]
	}
}

func TestOversizedAndInvalidFailWithoutRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stream := e.createStream("s", 1)
	p := e.publisher(kinesis.Config{Stream: stream})
	m := message("a", 1)
	_, size, err := p.Record(m)
	if err != nil {
		t.Fatal(err)
	}
	withPayload := func(n int) *outbox.Message { // the same event: same headers, same key
		c := *m
		c.Payload = publishertest.JSONOfSize(n)
		return &c
	}
	overhead := size - len(m.Payload)
	if err := p.Publish(timeout(t, 10*time.Second), withPayload(kinesis.DefaultMaxRecordBytes-overhead)); err != nil {
		t.Fatalf("a record of exactly %d bytes: %v", kinesis.DefaultMaxRecordBytes, err)
	}
	calls := e.fake.Calls("kinesis.PutRecords")
	for name, m := range map[string]*outbox.Message{
		"one byte over":    withPayload(kinesis.DefaultMaxRecordBytes - overhead + 1),
		"not JSON":         publishertest.NewMessage("a", `{"a":`),
		"key of 257 chars": message(strings.Repeat("é", 257), 1),
	} {
		if err := p.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) {
			t.Errorf("%s: %v, want permanent", name, err)
		}
	}
	if n := e.fake.Calls("kinesis.PutRecords") - calls; n != 0 {
		t.Errorf("%d requests sent for records Kinesis would refuse, want none", n)
	}
	if err := p.Publish(timeout(t, 10*time.Second), message(strings.Repeat("é", 256), 1)); err != nil {
		t.Errorf("a key of 256 characters: %v", err)
	}
}

func TestPartitionKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stream := e.createStream("s", 1)
	p := e.publisher(kinesis.Config{Stream: stream})
	noAgg := message("", 1)
	if err := p.Publish(timeout(t, 10*time.Second), noAgg); err != nil {
		t.Fatal(err)
	}
	got, err := e.read(timeout(t, 10*time.Second), stream, 1)
	if err != nil || got[0].Key != noAgg.ID.String() {
		t.Errorf("partition key of an event without aggregate id = %v, %v; want the event id %s", got, err, noAgg.ID)
	}
}

// TestThrottlingIsBackPressure: a throttled record fails as unavailable
// (no attempt counted), beside its neighbours that Kinesis took.
func TestThrottlingIsBackPressure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stream := e.createStream("s", 2)
	p := e.publisher(kinesis.Config{Stream: stream})
	e.fake.SetFaults(awsfake.Faults{Entry: func(en awsfake.Entry) *awsfake.EntryFault {
		if en.Key == "hot" {
			return throttle(en)
		}
		if strings.Contains(en.Body, "internal") {
			return &awsfake.EntryFault{Code: "InternalFailure", Message: "failed by the test"}
		}
		return nil
	}})
	msgs := []*outbox.Message{message("cold", 1), message("hot", 1), publishertest.NewMessage("warm", `{"internal":true}`), message("cold", 2)}
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("records of the cold key: %v, %v", errs[0], errs[3])
	}
	if c := outbox.Classify(errs[1]); c != outbox.ClassUnavailable || !strings.Contains(errs[1].Error(), "ProvisionedThroughputExceededException") {
		t.Errorf("throttled record: %v (%s), want unavailable", errs[1], c)
	}
	if c := outbox.Classify(errs[2]); errs[2] == nil || c != outbox.ClassTransient {
		t.Errorf("InternalFailure: %v (%s), want transient", errs[2], c)
	}
}

func TestKeyStopsAfterFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(kinesis.Config{Stream: e.createStream("s", 1), Concurrency: 1})
	e.fake.SetFaults(awsfake.Faults{Entry: func(en awsfake.Entry) *awsfake.EntryFault {
		if en.Key == "a" && strings.Contains(en.Body, `"i":3}`) {
			return &awsfake.EntryFault{Code: "InternalFailure", Message: "failed by the test"}
		}
		return nil
	}})
	var msgs []*outbox.Message
	for i := range 502 {
		msgs = append(msgs, message("a", i))
	}
	msgs = append(msgs, message("b", 0))
	// Calls of 500: a0..a499, then a500 a501 b0. a3 fails; a500 and a501
	// come in a later call and must not overtake a3's retry.
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		switch {
		case i == 3:
			if err == nil || !strings.Contains(err.Error(), "InternalFailure") {
				t.Errorf("a3: %v, want the injected failure", err)
			}
		case i == 500 || i == 501:
			if err == nil || !strings.Contains(err.Error(), "earlier event") || outbox.Classify(err) != outbox.ClassTransient {
				t.Errorf("a%d: %v (%s), want a transient 'not sent' error", i, err, outbox.Classify(err))
			}
		case err != nil:
			t.Errorf("message %d: %v", i, err)
		}
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("server gone", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		p := e.publisher(kinesis.Config{Stream: e.createStream("s", 1), Client: newClient(e.fake.URL())})
		e.fake.Close()
		for i, err := range p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)}) {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
		if err := p.Health(timeout(t, 10*time.Second)); err == nil {
			t.Error("Health = nil with the server gone")
		}
	})
	t.Run("server errors for the whole batch", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		p := e.publisher(kinesis.Config{Stream: e.createStream("s", 1)})
		e.fake.SetFaults(awsfake.Faults{Call: func(awsfake.Call) *awsfake.CallFault { return &awsfake.CallFault{Status: 500, Code: "InternalFailure"} }})
		for i, err := range p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)}) {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		client := awskinesis.New(awskinesis.Options{Region: awsfake.Region, BaseEndpoint: aws.String(e.fake.URL()),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{}, errors.New("no credentials configured")
			})})
		p := e.publisher(kinesis.Config{Stream: e.createStream("s", 1), Client: client})
		if err := p.Publish(timeout(t, 10*time.Second), message("a", 1)); outbox.Classify(err) != outbox.ClassUnavailable {
			t.Fatalf("err = %v (%s), want unavailable", err, outbox.Classify(err))
		}
	})
}

func TestCallErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code string
		want outbox.ErrorClass
	}{
		{"ProvisionedThroughputExceededException", outbox.ClassUnavailable},
		{"KMSThrottlingException", outbox.ClassUnavailable},
		{"KMSAccessDeniedException", outbox.ClassUnavailable},
		{"AccessDeniedException", outbox.ClassUnavailable},
		{"UnrecognizedClientException", outbox.ClassUnavailable},
		{"ResourceInUseException", outbox.ClassUnavailable},
		{"InvalidArgumentException", outbox.ClassTransient}, // the request's, not the stream's
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p := e.publisher(kinesis.Config{Stream: e.createStream("s", 1)})
			e.fake.SetFaults(awsfake.Faults{Call: func(awsfake.Call) *awsfake.CallFault { return &awsfake.CallFault{Status: 400, Code: tc.code} }})
			err := p.Publish(timeout(t, 10*time.Second), message("a", 1))
			if err == nil || outbox.Classify(err) != tc.want || !strings.Contains(err.Error(), tc.code) {
				t.Fatalf("err = %v (%s), want %s naming %s", err, outbox.Classify(err), tc.want, tc.code)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stream := e.createStream("s", 1)
	for _, s := range []string{stream, awsfake.StreamARN(stream)} {
		if err := e.publisher(kinesis.Config{Stream: s}).Health(timeout(t, 10*time.Second)); err != nil {
			t.Errorf("Health of %s: %v", s, err)
		}
	}
	err := e.publisher(kinesis.Config{Stream: "gone"}).Health(timeout(t, 10*time.Second))
	var missing kinesis.MissingStreamError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "--stream-name gone") {
		t.Errorf("Health of a missing stream = %v, want a MissingStreamError", err)
	}
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming kinesis.Config and the field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := newClient("http://127.0.0.1:1")
	for _, tc := range []struct {
		cfg   kinesis.Config
		field string
	}{
		{kinesis.Config{Stream: "s"}, "Client"},
		{kinesis.Config{Stream: "s", Client: awskinesis.New(awskinesis.Options{})}, "Client"},
		{kinesis.Config{Client: c}, "Stream"},
		{kinesis.Config{Client: c, Stream: "has space"}, "Stream"},
		{kinesis.Config{Client: c, Stream: "arn:aws:kinesis:eu-west-1:1:table/x"}, "Stream"},
		{kinesis.Config{Client: c, Stream: "s", MaxRecordBytes: 11 << 20}, "MaxRecordBytes"},
		{kinesis.Config{Client: c, Stream: "s", Concurrency: -1}, "Concurrency"},
	} {
		_, err := kinesis.New(tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "kinesis.Config", tc.field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultMaxRecordBytes": kinesis.DefaultMaxRecordBytes,
		"DefaultConcurrency":    kinesis.DefaultConcurrency,
	})
}

// Not parallel: it sets the AWS environment for the default credential chain.
func TestNewFromURL(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	e := newEnv(t)
	stream := e.createStream("orders", 1)
	u := &url.URL{Scheme: "kinesis", RawQuery: url.Values{"stream": {awsfake.StreamARN(stream)}, "endpoint": {e.fake.URL()}, "concurrency": {"2"}}.Encode()}
	p, err := kinesis.NewFromURL(u)
	if err != nil {
		t.Fatalf("NewFromURL(%s): %v", u, err)
	}
	m := message("a", 1)
	if err := p.Publish(timeout(t, 10*time.Second), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got, err := e.read(timeout(t, 10*time.Second), stream, 1); err != nil || got[0].Headers[outbox.HeaderEventID] != m.ID.String() {
		t.Fatalf("read %v, %v", got, err)
	}
	for _, s := range []string{
		"kinesis://?region=x",
		"kinesis://?stream=s&nope=1",
		"kinesis://AKID:secret@?stream=s",
		"kinesis://orders",
		"kinesis://?stream=s&endpoint=localhost:1",
		"kinesis://?stream=s&max_record_bytes=big",
		"sqs://?stream=s",
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kinesis.NewFromURL(u); err == nil {
			t.Errorf("NewFromURL(%s) = nil error", s)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error repeats the secret: %v", err)
		}
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	p, err := kinesis.New(kinesis.Config{Client: newClient("http://127.0.0.1:1"), Stream: "s"})
	if err != nil {
		t.Fatal(err)
	}
	m := message("42", 1)
	m.Headers = map[string]string{"tenant": "acme"}
	r, _, err := p.Record(m)
	if err != nil {
		t.Fatal(err)
	}
	env, err := kinesis.Decode(r.Data)
	if err != nil || string(env.Payload) != string(m.Payload) || env.Headers["tenant"] != "acme" || env.Headers[outbox.HeaderEventID] != m.ID.String() {
		t.Errorf("Decode = %+v, %v", env, err)
	}
	if _, err := kinesis.Decode([]byte(`{"order_id":1}`)); err == nil {
		t.Error("Decode of a record that is no envelope: nil error")
	}
}
