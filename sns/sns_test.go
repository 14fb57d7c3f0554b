package sns_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsfake"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/sns"
)

// env is one test's SNS: the fake (internal/awsfake), reached by the
// publisher through a TCP proxy the test can cut, and an admin client that
// bypasses the proxy.
type env struct {
	t      *testing.T
	fake   *awsfake.Server
	proxy  *tcpproxy.Proxy
	client *awssns.Client // through the proxy
	admin  *awssns.Client // straight to the fake
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := awsfake.Start()
	t.Cleanup(f.Close)
	p := tcpproxy.Start(t, f.Addr())
	return &env{t: t, fake: f, proxy: p, client: newClient("http://" + p.Addr()), admin: newClient(f.URL())}
}

// newClient is an SDK client as an application builds one, with static
// test credentials and retries spaced for a test (the SDK's default
// backoff goes up to 20s).
func newClient(endpoint string) *awssns.Client {
	return awssns.New(awssns.Options{
		Region:       awsfake.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxBackoff = 200 * time.Millisecond
		}),
	})
}

func (e *env) createTopic(name string, attrs map[string]string) string {
	e.t.Helper()
	if strings.HasSuffix(name, ".fifo") {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["FifoTopic"] = "true"
	}
	out, err := e.admin.CreateTopic(timeout(e.t, 10*time.Second), &awssns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	if err != nil {
		e.t.Fatalf("CreateTopic %s: %v", name, err)
	}
	return aws.ToString(out.TopicArn)
}

func (e *env) publisher(cfg sns.Config) *sns.Publisher {
	e.t.Helper()
	if cfg.Client == nil {
		cfg.Client = e.client
	}
	p, err := sns.New(cfg)
	if err != nil {
		e.t.Fatalf("sns.New: %v", err)
	}
	return p
}

type received struct {
	publishertest.Received
	Seq string // FIFO SequenceNumber
}

// read waits until the topic holds at least n messages or ctx ends, and
// returns them all as a subscriber with raw message delivery reads them:
// the body and the attributes.
func (e *env) read(ctx context.Context, arn string, n int) ([]received, error) {
	err := e.fake.Wait(ctx, func() bool { return len(e.fake.Messages(arn)) >= n })
	var out []received
	for _, m := range e.fake.Messages(arn) {
		h := map[string]string{}
		if a, ok := m.Attributes[sns.AttrHeaders]; ok {
			if err := json.Unmarshal([]byte(a.StringValue), &h); err != nil {
				return out, fmt.Errorf("attribute %s: %w", sns.AttrHeaders, err)
			}
		}
		for k, a := range m.Attributes {
			if k == sns.AttrHeaders {
				continue
			}
			if prev, ok := h[k]; ok && prev != a.StringValue {
				return out, fmt.Errorf("attribute %s = %q but %s has %q", k, a.StringValue, sns.AttrHeaders, prev)
			}
			h[k] = a.StringValue
		}
		out = append(out, received{Received: publishertest.Received{
			Topic: arn[strings.LastIndex(arn, ":")+1:], Key: m.GroupID, DedupID: m.DeduplicationID, Headers: h, Payload: []byte(m.Message),
		}, Seq: m.SequenceNumber})
	}
	return out, err
}

func (e *env) reader(arn string) func(context.Context, int) ([]publishertest.Received, error) {
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		got, err := e.read(ctx, arn, n)
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

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"orders", "orders.fifo"} {
		t.Run(topic, func(t *testing.T) {
			t.Parallel()
			publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
				e := newEnv(t)
				arn := e.createTopic(topic, nil)
				b := &publishertest.Broker{
					Publisher:      e.publisher(sns.Config{TopicARN: arn}),
					Unroutable:     e.publisher(sns.Config{TopicARN: awsfake.TopicARN("missing")}),
					UnroutableName: "aws sns create-topic --name missing",
					RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
						// Throttling on every call.
						e.fake.SetFaults(awsfake.Faults{Call: func(awsfake.Call) *awsfake.CallFault {
							return &awsfake.CallFault{Status: 400, Code: "Throttled"}
						}})
						return e.publisher(sns.Config{TopicARN: arn}), func() { e.fake.SetFaults(awsfake.Faults{}) }
					},
					MaxPayload: 256*1024 + 1,
					TopicOf:    func(*outbox.Message) string { return topic },
					Read:       e.reader(arn),
					Disconnect: func(t *testing.T) func() {
						e.proxy.Cut()
						return e.proxy.Restore
					},
					CloudEvents: &publishertest.CloudEvents{Prefix: "ce-", PercentEncoded: true, ContentType: "content-type"},
				}
				if strings.HasSuffix(topic, ".fifo") {
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
	arn := e.createTopic("t", nil)
	p := e.publisher(sns.Config{TopicARN: arn})
	var msgs []*outbox.Message
	for i := range 25 {
		msgs = append(msgs, message("a", i))
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if n := e.fake.Calls("sns.PublishBatch"); n != 3 {
		t.Errorf("25 messages took %d PublishBatch calls, want 3", n)
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
	if n := e.fake.Calls("sns.PublishBatch") - 3; n != 3 {
		t.Errorf("five 100 KB messages took %d calls, want 3 (at most 256 KiB per call)", n)
	}
	if got, err := e.read(timeout(t, 10*time.Second), arn, 30); err != nil || len(got) != 30 {
		t.Fatalf("read %d of 30: %v", len(got), err)
	}
}

func TestOversizedFailsWithoutRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(sns.Config{TopicARN: e.createTopic("t", nil)})
	for _, n := range []int{256*1024 + 1, 256 * 1024, 256*1024 - 100} { // attributes count too
		m := publishertest.NewMessage("a", string(publishertest.JSONOfSize(n)))
		err := p.Publish(timeout(t, 10*time.Second), m)
		if !errors.Is(err, outbox.ErrPermanent) || !strings.Contains(err.Error(), "exceeds the limit") {
			t.Errorf("payload of %d bytes: err = %v, want a permanent size error", n, err)
		}
	}
	if n := e.fake.Calls("sns.PublishBatch"); n != 0 {
		t.Errorf("%d requests sent for oversized messages, want none", n)
	}
	// A topic whose MaximumMessageSize was raised takes them.
	arn := e.createTopic("big", map[string]string{"MaximumMessageSize": fmt.Sprint(1 << 20)})
	p = e.publisher(sns.Config{TopicARN: arn, MaxMessageBytes: 1 << 20})
	if err := p.Publish(timeout(t, 10*time.Second), publishertest.NewMessage("a", string(publishertest.JSONOfSize(512<<10)))); err != nil {
		t.Errorf("512 KiB to a 1 MiB topic: %v", err)
	}
}

func TestPerEntryFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	arn := e.createTopic("t", nil)
	p := e.publisher(sns.Config{TopicARN: arn})
	e.fake.SetFaults(awsfake.Faults{Entry: func(en awsfake.Entry) *awsfake.EntryFault {
		switch {
		case strings.Contains(en.Body, "sender-fault"):
			return &awsfake.EntryFault{Code: "InvalidParameter", Message: "rejected by the test", SenderFault: true}
		case strings.Contains(en.Body, "server-fault"):
			return &awsfake.EntryFault{Code: "InternalError", Message: "failed by the test"}
		case strings.Contains(en.Body, "kms"):
			return &awsfake.EntryFault{Code: "KMSDisabled", Message: "key disabled by the test", SenderFault: true}
		}
		return nil
	}})
	msgs := []*outbox.Message{
		publishertest.NewMessage("a", `{"ok":1}`),
		publishertest.NewMessage("b", `{"sender-fault":true}`),
		publishertest.NewMessage("c", `{"server-fault":true}`),
		publishertest.NewMessage("d", `{"kms":true}`),
		publishertest.NewMessage("e", `{"ok":2}`),
	}
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	if errs[0] != nil || errs[4] != nil {
		t.Errorf("good entries failed: %v, %v", errs[0], errs[4])
	}
	for i, want := range map[int]struct {
		class outbox.ErrorClass
		code  string
	}{1: {outbox.ClassPermanent, "InvalidParameter"}, 2: {outbox.ClassTransient, "InternalError"}, 3: {outbox.ClassUnavailable, "KMSDisabled"}} {
		if c := outbox.Classify(errs[i]); errs[i] == nil || c != want.class || !strings.Contains(errs[i].Error(), want.code) {
			t.Errorf("entry %d: %v (%s), want %s naming %s", i, errs[i], c, want.class, want.code)
		}
	}
	if got, err := e.read(timeout(t, 10*time.Second), arn, 2); err != nil || len(got) != 2 {
		t.Fatalf("read %d messages, want the 2 accepted: %v", len(got), err)
	}
}

func TestFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	arn := e.createTopic("orders.fifo", nil)
	p := e.publisher(sns.Config{TopicARN: arn, Concurrency: 3})
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
	// A relay retry of an event SNS already has: deduplicated by event id.
	if err := p.Publish(timeout(t, 10*time.Second), msgs[7]); err != nil {
		t.Fatalf("re-send: %v", err)
	}
	got, err := e.read(timeout(t, 10*time.Second), arn, len(msgs))
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("topic holds %d messages, want %d (the re-send deduplicated): %v", len(got), len(msgs), err)
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
	p := e.publisher(sns.Config{TopicARN: e.createTopic("orders.fifo", nil), Concurrency: 1})
	e.fake.SetFaults(awsfake.Faults{Entry: func(en awsfake.Entry) *awsfake.EntryFault {
		if strings.Contains(en.Body, `"i":3}`) && strings.Contains(en.Body, `"agg":"a"`) {
			return &awsfake.EntryFault{Code: "InternalError", Message: "failed by the test"}
		}
		return nil
	}})
	var msgs []*outbox.Message
	for i := range 12 {
		msgs = append(msgs, message("a", i))
	}
	msgs = append(msgs, message("b", 0))
	// Calls of 10: a0..a9, then a10 a11 b0. a3 fails; a10 and a11 come in a
	// later call and must not overtake a3's retry.
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
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

func TestTopicTemplate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orders := e.createTopic("order-events", nil)
	users := e.createTopic("user-events", nil)
	p := e.publisher(sns.Config{TopicARN: awsfake.TopicARN("{aggregate_type}-events")})
	m1, m2 := message("1", 1), message("2", 2)
	m2.AggregateType = "user"
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), []*outbox.Message{m1, m2}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for arn, m := range map[string]*outbox.Message{orders: m1, users: m2} {
		got, err := e.read(timeout(t, 10*time.Second), arn, 1)
		if err != nil || got[0].Headers[outbox.HeaderEventID] != m.ID.String() {
			t.Errorf("topic %s: %v, %v; want event %s", arn, got, err, m.ID)
		}
	}
	if err := p.Health(timeout(t, 5*time.Second)); err != nil {
		t.Errorf("Health with a templated topic ARN: %v, want nil", err)
	}
	// A template rendering no valid ARN fails that event alone.
	bad := e.publisher(sns.Config{TopicARN: "{aggregate_type}"})
	if err := bad.Publish(timeout(t, 5*time.Second), m1); !errors.Is(err, outbox.ErrPermanent) || !strings.Contains(err.Error(), "not an sns ARN") {
		t.Errorf("template rendering %q: %v, want permanent", m1.AggregateType, err)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("server gone", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		arn := e.createTopic("t", nil)
		p := e.publisher(sns.Config{TopicARN: arn, Client: newClient(e.fake.URL())})
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
		p := e.publisher(sns.Config{TopicARN: e.createTopic("t", nil)})
		e.fake.SetFaults(awsfake.Faults{Call: func(awsfake.Call) *awsfake.CallFault { return &awsfake.CallFault{Status: 500, Code: "InternalError"} }})
		for i, err := range p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)}) {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
	})
	t.Run("server error for one call of many", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		p := e.publisher(sns.Config{TopicARN: e.createTopic("t", nil)})
		e.fake.SetFaults(awsfake.Faults{Call: func(c awsfake.Call) *awsfake.CallFault {
			if strings.Contains(c.Bodies[0], "fail-call") {
				return &awsfake.CallFault{Status: 503, Code: "ServiceUnavailable"}
			}
			return nil
		}})
		var msgs []*outbox.Message
		for i := range 15 {
			msgs = append(msgs, message("a", i))
			if i >= 10 {
				msgs[i].Payload = []byte(`{"fail-call":true}`)
			}
		}
		for i, err := range p.PublishBatch(timeout(t, 10*time.Second), msgs) {
			switch {
			case i < 10 && err != nil:
				t.Errorf("message %d of the accepted call: %v", i, err)
			case i >= 10 && (err == nil || outbox.Classify(err) != outbox.ClassTransient):
				t.Errorf("message %d: %v (%s), want transient: SNS accepted part of the batch", i, err, outbox.Classify(err))
			}
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		client := awssns.New(awssns.Options{Region: awsfake.Region, BaseEndpoint: aws.String(e.fake.URL()),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{}, errors.New("no credentials configured")
			})})
		p := e.publisher(sns.Config{TopicARN: e.createTopic("t", nil), Client: client})
		if err := p.Publish(timeout(t, 10*time.Second), message("a", 1)); outbox.Classify(err) != outbox.ClassUnavailable {
			t.Fatalf("err = %v (%s), want unavailable", err, outbox.Classify(err))
		}
	})
}

func TestCallErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
		want   outbox.ErrorClass
	}{
		// Refusals hitting every message alike are outages.
		{403, "AuthorizationError", outbox.ClassUnavailable},
		{400, "KMSAccessDenied", outbox.ClassUnavailable},
		{403, "InvalidClientTokenId", outbox.ClassUnavailable},
		{403, "SignatureDoesNotMatch", outbox.ClassUnavailable},
		{400, "Throttled", outbox.ClassUnavailable},
		{404, "NotFound", outbox.ClassUnavailable},
		// A request the service judged wrong stays the message's.
		{400, "InvalidParameter", outbox.ClassTransient},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p := e.publisher(sns.Config{TopicARN: e.createTopic("t", nil)})
			e.fake.SetFaults(awsfake.Faults{Call: func(awsfake.Call) *awsfake.CallFault { return &awsfake.CallFault{Status: tc.status, Code: tc.code} }})
			err := p.Publish(timeout(t, 10*time.Second), message("a", 1))
			if err == nil || outbox.Classify(err) != tc.want || !strings.Contains(err.Error(), tc.code) {
				t.Fatalf("err = %v (%s), want %s naming %s", err, outbox.Classify(err), tc.want, tc.code)
			}
		})
	}
}

func TestInvalidMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(sns.Config{TopicARN: e.createTopic("t.fifo", nil)})
	long := message(strings.Repeat("x", 129), 1)
	spaced := message("has space", 1)
	empty := message("a", 1)
	empty.Payload = nil
	binary := message("a", 1)
	binary.Payload = []byte{'"', 0xff, '"'}
	for name, m := range map[string]*outbox.Message{"long group": long, "space in group": spaced, "empty body": empty, "not UTF-8": binary} {
		if err := p.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) {
			t.Errorf("%s: err = %v, want permanent", name, err)
		}
	}
	if n := e.fake.Calls("sns.PublishBatch"); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	arn := e.createTopic("t", nil)
	if err := e.publisher(sns.Config{TopicARN: arn}).Health(timeout(t, 10*time.Second)); err != nil {
		t.Errorf("Health: %v", err)
	}
	err := e.publisher(sns.Config{TopicARN: arn + "-missing"}).Health(timeout(t, 10*time.Second))
	var missing sns.MissingTopicError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "aws sns create-topic --name t-missing") {
		t.Errorf("Health of a missing topic = %v, want a MissingTopicError", err)
	}
}

func TestEntryMapping(t *testing.T) {
	t.Parallel()
	p, err := sns.New(sns.Config{Client: newClient("http://127.0.0.1:1"), TopicARN: "arn:aws:sns:eu-west-1:123456789012:orders"})
	if err != nil {
		t.Fatal(err)
	}
	m := message("42", 1)
	m.Headers = map[string]string{"tenant": "acme", outbox.HeaderEventID: "spoofed", "h1": "1", "h2": "2", "h3": "3", "h4": "4", "h5": "5", "h6": "6"}
	e, size, err := p.Entry(m)
	if err != nil {
		t.Fatal(err)
	}
	if e.MessageGroupId != nil || e.MessageDeduplicationId != nil {
		t.Error("group or dedup id set on a standard topic")
	}
	if len(e.MessageAttributes) != 6 {
		t.Errorf("%d attributes, want the 5 standard headers and %s, however many headers the row has", len(e.MessageAttributes), sns.AttrHeaders)
	}
	var all map[string]string
	if err := json.Unmarshal([]byte(aws.ToString(e.MessageAttributes[sns.AttrHeaders].StringValue)), &all); err != nil {
		t.Fatal(err)
	}
	if all["tenant"] != "acme" || all["h6"] != "6" || all[outbox.HeaderEventID] != m.ID.String() {
		t.Errorf("%s = %v", sns.AttrHeaders, all)
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
// naming sns.Config and the field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := newClient("http://127.0.0.1:1")
	arn := "arn:aws:sns:eu-west-1:1:t"
	for _, tc := range []struct {
		cfg   sns.Config
		field string
	}{
		{sns.Config{TopicARN: arn}, "Client"},
		{sns.Config{TopicARN: arn, Client: awssns.New(awssns.Options{})}, "Client"},
		{sns.Config{Client: c}, "TopicARN"},
		{sns.Config{Client: c, TopicARN: "orders"}, "TopicARN"},
		{sns.Config{Client: c, TopicARN: "arn:aws:sqs:eu-west-1:1:t"}, "TopicARN"},
		{sns.Config{Client: c, TopicARN: "arn:aws:sns:eu-west-1:1:{nope}"}, "TopicARN"},
		{sns.Config{Client: c, TopicARN: arn, MaxMessageBytes: 2 << 20}, "MaxMessageBytes"},
		{sns.Config{Client: c, TopicARN: arn, Concurrency: -1}, "Concurrency"},
	} {
		_, err := sns.New(tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "sns.Config", tc.field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultMaxMessageBytes": sns.DefaultMaxMessageBytes,
		"DefaultConcurrency":     sns.DefaultConcurrency,
	})
}

// Not parallel: it sets the AWS environment for the default credential chain.
func TestNewFromURL(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	e := newEnv(t)
	arn := e.createTopic("t", nil)
	u := &url.URL{Scheme: "sns", RawQuery: url.Values{"topic_arn": {arn}, "endpoint": {e.fake.URL()}, "concurrency": {"2"}}.Encode()}
	p, err := sns.NewFromURL(u)
	if err != nil {
		t.Fatalf("NewFromURL(%s): %v", u, err)
	}
	m := message("a", 1)
	if err := p.Publish(timeout(t, 10*time.Second), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got, err := e.read(timeout(t, 10*time.Second), arn, 1); err != nil || got[0].Headers[outbox.HeaderEventID] != m.ID.String() {
		t.Fatalf("read %v, %v", got, err)
	}
	for _, s := range []string{
		"sns://?region=x",
		"sns://?topic_arn=" + url.QueryEscape(arn) + "&nope=1",
		"sns://AKID:secret@?topic_arn=" + url.QueryEscape(arn),
		"sns://?topic_arn=" + url.QueryEscape(arn) + "&endpoint=localhost:1",
		"sns://?topic_arn=" + url.QueryEscape(arn) + "&max_message_bytes=big",
		"sns://?topic_arn=orders",
		"kafka://?topic_arn=" + url.QueryEscape(arn),
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sns.NewFromURL(u); err == nil {
			t.Errorf("NewFromURL(%s) = nil error", s)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error repeats the secret: %v", err)
		}
	}
}
