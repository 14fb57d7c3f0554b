package sqs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/sqsfake"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/sqs"
)

// env is one test's SQS: the fake (internal/sqsfake), reached by the
// publisher through a TCP proxy the test can cut, and a consumer client that
// bypasses the proxy.
type env struct {
	t        *testing.T
	fake     *sqsfake.Server
	proxy    *tcpproxy.Proxy
	client   *awssqs.Client // through the proxy
	consumer *awssqs.Client // straight to the fake
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := sqsfake.Start()
	t.Cleanup(f.Close)
	p := tcpproxy.Start(t, f.Addr())
	return &env{t: t, fake: f, proxy: p, client: newClient("http://" + p.Addr()), consumer: newClient(f.URL())}
}

// newClient is an SDK client as an application builds one, with static
// test credentials and retries spaced for a test (the SDK's default
// backoff goes up to 20s).
func newClient(endpoint string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxBackoff = 200 * time.Millisecond
		}),
	})
}

func (e *env) createQueue(name string, attrs map[string]string) string {
	e.t.Helper()
	if strings.HasSuffix(name, ".fifo") {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["FifoQueue"] = "true"
	}
	out, err := e.consumer.CreateQueue(timeout(e.t, 10*time.Second), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		e.t.Fatalf("CreateQueue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

func (e *env) publisher(cfg sqs.Config) *sqs.Publisher {
	e.t.Helper()
	if cfg.Client == nil {
		cfg.Client = e.client
	}
	p, err := sqs.New(cfg)
	if err != nil {
		e.t.Fatalf("sqs.New: %v", err)
	}
	return p
}

type received struct {
	publishertest.Received
	Seq string // FIFO SequenceNumber
}

// reader consumes a queue like an application: receive (long polling),
// remember, delete. It keeps what it consumed, so every Read returns all
// messages so far.
type reader struct {
	e     *env
	queue string
	mu    sync.Mutex
	got   []received
	seen  map[string]bool // SQS message ids: SQS may deliver one twice
}

func (r *reader) Read(ctx context.Context, n int) ([]received, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := r.queue[strings.LastIndex(r.queue, "/")+1:]
	for len(r.got) < n {
		if err := ctx.Err(); err != nil {
			return slices.Clone(r.got), err
		}
		out, err := r.e.consumer.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(r.queue), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 5,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return slices.Clone(r.got), err
		}
		var del []types.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
			if r.seen == nil {
				r.seen = map[string]bool{}
			}
			if r.seen[aws.ToString(m.MessageId)] {
				continue
			}
			r.seen[aws.ToString(m.MessageId)] = true
			h := map[string]string{}
			if a, ok := m.MessageAttributes[sqs.AttrHeaders]; ok {
				if err := json.Unmarshal([]byte(aws.ToString(a.StringValue)), &h); err != nil {
					return slices.Clone(r.got), fmt.Errorf("attribute %s: %w", sqs.AttrHeaders, err)
				}
			}
			for k, a := range m.MessageAttributes {
				if k != sqs.AttrHeaders {
					if prev, ok := h[k]; ok && prev != aws.ToString(a.StringValue) {
						return slices.Clone(r.got), fmt.Errorf("attribute %s = %q but %s has %q", k, aws.ToString(a.StringValue), sqs.AttrHeaders, prev)
					}
					h[k] = aws.ToString(a.StringValue)
				}
			}
			r.got = append(r.got, received{Received: publishertest.Received{
				Topic: name, Key: m.Attributes["MessageGroupId"], DedupID: m.Attributes["MessageDeduplicationId"],
				Headers: h, Payload: []byte(aws.ToString(m.Body)),
			}, Seq: m.Attributes["SequenceNumber"]})
		}
		if len(del) > 0 {
			if _, err := r.e.consumer.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.queue), Entries: del}); err != nil {
				return slices.Clone(r.got), err
			}
		}
	}
	return slices.Clone(r.got), nil
}

func (r *reader) conformance(ctx context.Context, n int) ([]publishertest.Received, error) {
	got, err := r.Read(ctx, n)
	out := make([]publishertest.Received, len(got))
	for i, g := range got {
		out[i] = g.Received
	}
	return out, err
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, queue := range []string{"orders", "orders.fifo"} {
		t.Run(queue, func(t *testing.T) {
			t.Parallel()
			publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
				e := newEnv(t)
				qurl := e.createQueue(queue, nil)
				b := &publishertest.Broker{
					Publisher:      e.publisher(sqs.Config{QueueURL: qurl}),
					Unroutable:     e.publisher(sqs.Config{QueueURL: strings.TrimSuffix(qurl, queue) + "missing"}),
					UnroutableName: "aws sqs create-queue --queue-name missing",
					RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
						// Throttling on every call.
						e.fake.SetFaults(nil, func([]string) (int, string) { return 400, "RequestThrottled" })
						return e.publisher(sqs.Config{QueueURL: qurl}), func() { e.fake.SetFaults(nil, nil) }
					},
					MaxPayload: 256*1024 + 1,
					TopicOf:    func(*outbox.Message) string { return queue },
					Read:       (&reader{e: e, queue: qurl}).conformance,
					Disconnect: func(t *testing.T) func() {
						e.proxy.Cut()
						return e.proxy.Restore
					},
					CloudEvents: &publishertest.CloudEvents{Prefix: "ce-", PercentEncoded: true, ContentType: "content-type"},
				}
				if strings.HasSuffix(queue, ".fifo") {
					b.KeyOf = func(m *outbox.Message) string { return m.AggregateID }
				}
				return b
			})
		})
	}
}

func message(agg string, i int) *outbox.Message {
	return publishertest.NewMessage(agg, fmt.Sprintf(`{"agg":%q,"i":%d}`, agg, i))
}

func TestBatchesOfTenAndByteLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qurl := e.createQueue("q", map[string]string{"MaximumMessageSize": fmt.Sprint(1 << 20)})
	p := e.publisher(sqs.Config{QueueURL: qurl})
	var msgs []*outbox.Message
	for i := range 25 {
		msgs = append(msgs, message("a", i))
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if n := e.fake.SendCalls(); n != 3 {
		t.Errorf("25 messages took %d SendMessageBatch calls, want 3", n)
	}

	// 100 KB messages: two per call under the 256 KiB default.
	big := make([]*outbox.Message, 5)
	for i := range big {
		big[i] = publishertest.NewMessage("b", string(publishertest.JSONOfSize(100_000)))
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), big) {
		if err != nil {
			t.Fatalf("big message %d: %v", i, err)
		}
	}
	if n := e.fake.SendCalls() - 3; n != 3 {
		t.Errorf("five 100 KB messages took %d calls, want 3 (at most 256 KiB per call)", n)
	}
	got, err := (&reader{e: e, queue: qurl}).Read(timeout(t, 30*time.Second), 30)
	if err != nil {
		t.Fatalf("read %d of 30: %v", len(got), err)
	}
}

func TestOversizedFailsWithoutRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(sqs.Config{QueueURL: e.createQueue("q", nil)})
	for _, n := range []int{256*1024 + 1, 256 * 1024, 256*1024 - 100} { // attributes count too
		m := publishertest.NewMessage("a", string(publishertest.JSONOfSize(n)))
		err := p.Publish(timeout(t, 10*time.Second), m)
		if !errors.Is(err, outbox.ErrPermanent) || !strings.Contains(err.Error(), "exceeds the limit") {
			t.Errorf("payload of %d bytes: err = %v, want a permanent size error", n, err)
		}
	}
	if n := e.fake.SendCalls(); n != 0 {
		t.Errorf("%d requests sent for oversized messages, want none", n)
	}
}

func TestPerEntryFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qurl := e.createQueue("q", nil)
	p := e.publisher(sqs.Config{QueueURL: qurl})
	e.fake.SetFaults(func(body string) *sqsfake.EntryFault {
		switch {
		case strings.Contains(body, "sender-fault"):
			return &sqsfake.EntryFault{Code: "InvalidParameterValue", Message: "rejected by the test", SenderFault: true}
		case strings.Contains(body, "server-fault"):
			return &sqsfake.EntryFault{Code: "InternalError", Message: "failed by the test"}
		}
		return nil
	}, nil)
	msgs := []*outbox.Message{
		publishertest.NewMessage("a", `{"ok":1}`),
		publishertest.NewMessage("b", `{"sender-fault":true}`),
		publishertest.NewMessage("c", `{"server-fault":true}`),
		publishertest.NewMessage("d", `{"ok":2}`),
	}
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("good entries failed: %v, %v", errs[0], errs[3])
	}
	if c := outbox.Classify(errs[1]); c != outbox.ClassPermanent || !strings.Contains(errs[1].Error(), "InvalidParameterValue") {
		t.Errorf("SenderFault entry: %v (%s), want permanent with the code", errs[1], c)
	}
	if c := outbox.Classify(errs[2]); errs[2] == nil || c != outbox.ClassTransient || !strings.Contains(errs[2].Error(), "InternalError") {
		t.Errorf("server-side entry failure: %v (%s), want transient with the code", errs[2], c)
	}
	got, err := (&reader{e: e, queue: qurl}).Read(timeout(t, 30*time.Second), 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("read %d messages, want the 2 accepted: %v", len(got), err)
	}
}

func TestFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qurl := e.createQueue("orders.fifo", nil)
	p := e.publisher(sqs.Config{QueueURL: qurl, Concurrency: 3})
	aggs := []string{"a-1", "b-2", "c-3", "d-4", "e-5"}
	var msgs []*outbox.Message
	for i := range 12 {
		for _, a := range aggs {
			msgs = append(msgs, message(a, i))
		}
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	// A relay retry of an event SQS already has: deduplicated by event id.
	if err := p.Publish(timeout(t, 10*time.Second), msgs[7]); err != nil {
		t.Fatalf("re-send: %v", err)
	}

	r := &reader{e: e, queue: qurl}
	got, err := r.Read(timeout(t, 30*time.Second), len(msgs))
	if err != nil {
		t.Fatalf("read %d of %d: %v", len(got), len(msgs), err)
	}
	if more, _ := r.Read(timeout(t, 1500*time.Millisecond), len(msgs)+1); len(more) != len(msgs) {
		t.Errorf("queue holds %d messages, want %d: the re-sent event was not deduplicated", len(more), len(msgs))
	}
	pos := map[string]int{}
	for i, m := range msgs {
		pos[m.ID.String()] = i
	}
	slices.SortFunc(got, func(a, b received) int { return strings.Compare(a.Seq, b.Seq) })
	last := map[string]int{}
	for _, g := range got {
		if g.DedupID != g.Headers[outbox.HeaderEventID] || g.Key != g.Headers[outbox.HeaderAggregateID] {
			t.Fatalf("MessageDeduplicationId %q / MessageGroupId %q, want event id %s / aggregate id %s",
				g.DedupID, g.Key, g.Headers[outbox.HeaderEventID], g.Headers[outbox.HeaderAggregateID])
		}
		i := pos[g.DedupID]
		if prev, ok := last[g.Key]; ok && i < prev {
			t.Fatalf("group %s: event published %dth stored after the %dth", g.Key, i, prev)
		}
		last[g.Key] = i
	}
}

func TestFIFOStopsGroupAfterFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qurl := e.createQueue("orders.fifo", nil)
	p := e.publisher(sqs.Config{QueueURL: qurl, Concurrency: 1})
	e.fake.SetFaults(func(body string) *sqsfake.EntryFault {
		if strings.Contains(body, `"i":3}`) && strings.Contains(body, `"agg":"a"`) {
			return &sqsfake.EntryFault{Code: "InternalError", Message: "failed by the test"}
		}
		return nil
	}, nil)
	var msgs []*outbox.Message
	for i := range 12 {
		msgs = append(msgs, message("a", i))
	}
	msgs = append(msgs, message("b", 0))
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	// Calls of 10: a0..a9, then a10 a11 b0. a3 fails; a10 and a11 come in a
	// later call and must not overtake a3's retry.
	for i, err := range errs {
		switch {
		case i == 3:
			if err == nil || !strings.Contains(err.Error(), "InternalError") {
				t.Errorf("a3: %v, want the injected failure", err)
			}
		case i == 10 || i == 11:
			if err == nil || !strings.Contains(err.Error(), "earlier event") || outbox.Classify(err) != outbox.ClassTransient {
				t.Errorf("a%d: %v (%s), want a transient 'not sent' error", i, err, outbox.Classify(err))
			}
		case err != nil:
			t.Errorf("message %d: %v", i, err)
		}
	}
}

func TestQueueTemplate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orders := e.createQueue("order-events", nil)
	users := e.createQueue("user-events", nil)
	base := strings.TrimSuffix(orders, "order-events")
	p := e.publisher(sqs.Config{QueueURL: base + "{aggregate_type}-events"})
	m1, m2 := message("1", 1), message("2", 2)
	m2.AggregateType = "user"
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), []*outbox.Message{m1, m2}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for q, m := range map[string]*outbox.Message{orders: m1, users: m2} {
		got, err := (&reader{e: e, queue: q}).Read(timeout(t, 10*time.Second), 1)
		if err != nil || got[0].Headers[outbox.HeaderEventID] != m.ID.String() {
			t.Errorf("queue %s: %v, %v; want event %s", q, got, err, m.ID)
		}
	}
	if err := p.Health(timeout(t, 5*time.Second)); err != nil {
		t.Errorf("Health with a templated queue URL: %v, want nil", err)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("server gone", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		qurl := e.createQueue("q", nil)
		addr := e.fake.Addr()
		p := e.publisher(sqs.Config{QueueURL: qurl, Client: newClient("http://" + addr)})
		e.fake.Close() // connections are refused from now on
		errs := p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)})
		for i, err := range errs {
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
		p := e.publisher(sqs.Config{QueueURL: e.createQueue("q", nil)})
		e.fake.SetFaults(nil, func([]string) (int, string) { return 500, "InternalError" })
		for i, err := range p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)}) {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
	})
	t.Run("server error for one call of many", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		p := e.publisher(sqs.Config{QueueURL: e.createQueue("q", nil)})
		e.fake.SetFaults(nil, func(bodies []string) (int, string) {
			if strings.Contains(bodies[0], "fail-call") { // the second call, and its SDK retries
				return 503, "ServiceUnavailable"
			}
			return 0, ""
		})
		var msgs []*outbox.Message
		for i := range 15 {
			msgs = append(msgs, message("a", i))
			if i >= 10 {
				msgs[i].Payload = []byte(`{"fail-call":true}`)
			}
		}
		errs := p.PublishBatch(timeout(t, 10*time.Second), msgs)
		for i, err := range errs {
			switch {
			case i < 10 && err != nil:
				t.Errorf("message %d of the accepted call: %v", i, err)
			case i >= 10 && (err == nil || outbox.Classify(err) != outbox.ClassTransient):
				t.Errorf("message %d: %v (%s), want transient: SQS accepted part of the batch", i, err, outbox.Classify(err))
			}
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		client := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.fake.URL()),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{}, errors.New("no credentials configured")
			})})
		p := e.publisher(sqs.Config{QueueURL: e.createQueue("q", nil), Client: client})
		err := p.Publish(timeout(t, 10*time.Second), message("a", 1))
		if outbox.Classify(err) != outbox.ClassUnavailable {
			t.Fatalf("err = %v (%s), want unavailable", err, outbox.Classify(err))
		}
	})
}

func TestCallErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		typ    string
		want   outbox.ErrorClass
	}{
		// Refusals hitting every message alike are outages.
		{400, "AccessDenied", outbox.ClassUnavailable},
		{400, "KmsAccessDenied", outbox.ClassUnavailable},
		{400, "InvalidClientTokenId", outbox.ClassUnavailable},
		{400, "SignatureDoesNotMatch", outbox.ClassUnavailable},
		{400, "RequestThrottled", outbox.ClassUnavailable},
		{400, "ThrottlingException", outbox.ClassUnavailable},
		{400, "AWS.SimpleQueueService.NonExistentQueue", outbox.ClassUnavailable},
		// A request the service judged wrong stays the message's.
		{400, "InvalidParameterValue", outbox.ClassTransient},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p := e.publisher(sqs.Config{QueueURL: e.createQueue("q", nil)})
			e.fake.SetFaults(nil, func([]string) (int, string) { return tc.status, tc.typ })
			err := p.Publish(timeout(t, 10*time.Second), message("a", 1))
			if err == nil || outbox.Classify(err) != tc.want || !strings.Contains(err.Error(), tc.typ) {
				t.Fatalf("err = %v (%s), want %s naming %s", err, outbox.Classify(err), tc.want, tc.typ)
			}
		})
	}
}

func TestInvalidMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(sqs.Config{QueueURL: e.createQueue("q.fifo", nil)})
	long := message(strings.Repeat("x", 129), 1)
	spaced := message("has space", 1)
	empty := message("a", 1)
	empty.Payload = nil
	for name, m := range map[string]*outbox.Message{"long group": long, "space in group": spaced, "empty body": empty} {
		if err := p.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) {
			t.Errorf("%s: err = %v, want permanent", name, err)
		}
	}
	if n := e.fake.SendCalls(); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qurl := e.createQueue("q", nil)
	if err := e.publisher(sqs.Config{QueueURL: qurl}).Health(timeout(t, 10*time.Second)); err != nil {
		t.Errorf("Health: %v", err)
	}
	if err := e.publisher(sqs.Config{QueueURL: qurl + "-missing"}).Health(timeout(t, 10*time.Second)); err == nil {
		t.Error("Health of a missing queue = nil")
	}
}

func TestEntryMapping(t *testing.T) {
	t.Parallel()
	p, err := sqs.New(sqs.Config{Client: newClient("http://127.0.0.1:1"), QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"})
	if err != nil {
		t.Fatal(err)
	}
	m := message("42", 1)
	m.Headers = map[string]string{"tenant": "acme", outbox.HeaderEventID: "spoofed"}
	e, size, err := p.Entry(m)
	if err != nil {
		t.Fatal(err)
	}
	if e.MessageGroupId != nil || e.MessageDeduplicationId != nil {
		t.Error("group or dedup id set on a standard queue")
	}
	if len(e.MessageAttributes) != 6 {
		t.Errorf("%d attributes, want the 5 standard headers and %s", len(e.MessageAttributes), sqs.AttrHeaders)
	}
	var all map[string]string
	if err := json.Unmarshal([]byte(aws.ToString(e.MessageAttributes[sqs.AttrHeaders].StringValue)), &all); err != nil {
		t.Fatal(err)
	}
	if all["tenant"] != "acme" || all[outbox.HeaderEventID] != m.ID.String() {
		t.Errorf("%s = %v", sqs.AttrHeaders, all)
	}
	want := len(m.Payload)
	for k, a := range e.MessageAttributes {
		want += len(k) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue))
	}
	if size != want {
		t.Errorf("size = %d, want %d", size, want)
	}
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming sqs.Config and the field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := newClient("http://127.0.0.1:1")
	for _, tc := range []struct {
		cfg   sqs.Config
		field string
	}{
		{sqs.Config{QueueURL: "https://h/1/q"}, "Client"},
		{sqs.Config{QueueURL: "https://h/1/q", Client: awssqs.New(awssqs.Options{})}, "Client"},
		{sqs.Config{Client: c}, "QueueURL"},
		{sqs.Config{Client: c, QueueURL: "orders"}, "QueueURL"},
		{sqs.Config{Client: c, QueueURL: "https://h/1/{nope}"}, "QueueURL"},
		{sqs.Config{Client: c, QueueURL: "https://h/1/q", MaxMessageBytes: 2 << 20}, "MaxMessageBytes"},
		{sqs.Config{Client: c, QueueURL: "https://h/1/q", Concurrency: -1}, "Concurrency"},
	} {
		_, err := sqs.New(tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "sqs.Config", tc.field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultMaxMessageBytes": sqs.DefaultMaxMessageBytes,
		"DefaultConcurrency":     sqs.DefaultConcurrency,
	})
}

// Not parallel: it sets the AWS environment for the default credential chain.
func TestNewFromURL(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	e := newEnv(t)
	qurl := e.createQueue("q", nil)
	u := &url.URL{Scheme: "sqs", RawQuery: url.Values{
		"queue_url": {qurl}, "region": {"eu-west-1"}, "endpoint": {e.fake.URL()}, "concurrency": {"2"},
	}.Encode()}
	p, err := sqs.NewFromURL(u)
	if err != nil {
		t.Fatalf("NewFromURL(%s): %v", u, err)
	}
	m := message("a", 1)
	if err := p.Publish(timeout(t, 10*time.Second), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got, err := (&reader{e: e, queue: qurl}).Read(timeout(t, 10*time.Second), 1)
	if err != nil || got[0].Headers[outbox.HeaderEventID] != m.ID.String() {
		t.Fatalf("read %v, %v", got, err)
	}

	for _, s := range []string{
		"sqs://?region=x",
		"sqs://?queue_url=" + url.QueryEscape(qurl) + "&nope=1",
		"sqs://AKID:secret@?queue_url=" + url.QueryEscape(qurl),
		"sqs://?queue_url=" + url.QueryEscape(qurl) + "&endpoint=localhost:1",
		"sqs://?queue_url=" + url.QueryEscape(qurl) + "&max_message_bytes=big",
		"kafka://?queue_url=" + url.QueryEscape(qurl),
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sqs.NewFromURL(u); err == nil {
			t.Errorf("NewFromURL(%s) = nil error", s)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error repeats the secret: %v", err)
		}
	}
}

// With CreateQueues a missing queue is created and the batch sent again;
// without, it is an outage naming the create-queue command.
func TestCreateQueues(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"made", "made.fifo"} {
		e := newEnv(t)
		qurl := strings.TrimSuffix(e.createQueue("exists", nil), "exists") + name
		err := e.publisher(sqs.Config{QueueURL: qurl}).Publish(timeout(t, 10*time.Second), message("a", 1))
		var missing sqs.MissingQueueError
		if !errors.As(err, &missing) || outbox.Classify(err) != outbox.ClassUnavailable || !strings.Contains(err.Error(), "--queue-name "+name) {
			t.Fatalf("%s without CreateQueues: %v (%s), want an unavailable MissingQueueError", name, err, outbox.Classify(err))
		}
		pub := e.publisher(sqs.Config{QueueURL: qurl, CreateQueues: true})
		msgs := []*outbox.Message{message("a", 1), message("a", 2)}
		for i, err := range pub.PublishBatch(timeout(t, 10*time.Second), msgs) {
			if err != nil {
				t.Fatalf("%s with CreateQueues, message %d: %v", name, i, err)
			}
		}
		got, err := (&reader{e: e, queue: qurl}).Read(timeout(t, 10*time.Second), 2)
		if err != nil || len(got) != 2 {
			t.Fatalf("%s: read %d messages: %v", name, len(got), err)
		}
	}
	if _, err := sqs.New(sqs.Config{Client: apiOnly{}, QueueURL: "https://sqs.eu-west-1.amazonaws.com/1/q", CreateQueues: true}); err == nil {
		t.Error("CreateQueues with a client that cannot create queues: accepted")
	}
}

// apiOnly implements sqs.API and nothing more.
type apiOnly struct{ sqs.API }

// SQS carries 10 message attributes: in binary content mode the 7 context
// attributes, then the extensions that fit, the aggregate type and the
// trace context first; structured mode carries every one in the body.
func TestCloudEventsAttributeLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := e.publisher(sqs.Config{QueueURL: e.createQueue("ce-limit", nil)})
	m := publishertest.NewMessage("42", `{"a":1}`)
	m.Envelope = outbox.EnvelopeCloudEvents
	m.Headers["tracestate"] = "k=v"
	m.Headers["alpha"] = "1"
	m.Headers["beta"] = "2"
	entry, _, err := pub.Entry(m)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range entry.MessageAttributes {
		names = append(names, k)
	}
	slices.Sort(names)
	want := []string{"ce-datacontenttype", "ce-id", "ce-outboxaggregatetype", "ce-source", "ce-specversion",
		"ce-subject", "ce-time", "ce-tracestate", "ce-traceparent", "ce-type"}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("attributes %v, want %v", names, want)
	}
	m.Envelope = outbox.EnvelopeCloudEventsStructured
	entry, _, err = pub.Entry(m)
	if err != nil {
		t.Fatal(err)
	}
	body := aws.ToString(entry.MessageBody)
	for _, ext := range []string{`"alpha":"1"`, `"beta":"2"`, `"tenant":"acme"`, `"tracestate":"k=v"`} {
		if !strings.Contains(body, ext) {
			t.Errorf("structured body %s lacks %s", body, ext)
		}
	}
	if len(entry.MessageAttributes) != 1 || aws.ToString(entry.MessageAttributes["content-type"].StringValue) != "application/cloudevents+json" {
		t.Errorf("structured attributes %v", entry.MessageAttributes)
	}
}
