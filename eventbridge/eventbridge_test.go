package eventbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awseventbridge "github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/eventbridge"
	"github.com/pgoutbox/outbox/internal/awsfake"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/publishertest"
)

// env is one test's EventBridge: the fake (internal/awsfake), reached by the
// publisher through a TCP proxy the test can cut, and an admin client that
// bypasses the proxy.
type env struct {
	t      *testing.T
	fake   *awsfake.Server
	proxy  *tcpproxy.Proxy
	client *awseventbridge.Client // through the proxy
	admin  *awseventbridge.Client // straight to the fake
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
func newClient(endpoint string) *awseventbridge.Client {
	return awseventbridge.New(awseventbridge.Options{
		Region:       awsfake.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxBackoff = 200 * time.Millisecond
		}),
	})
}

func (e *env) createBus(name string) string {
	e.t.Helper()
	if _, err := e.admin.CreateEventBus(timeout(e.t, 10*time.Second), &awseventbridge.CreateEventBusInput{Name: aws.String(name)}); err != nil {
		e.t.Fatalf("CreateEventBus %s: %v", name, err)
	}
	return name
}

func (e *env) publisher(cfg eventbridge.Config) *eventbridge.Publisher {
	e.t.Helper()
	if cfg.Client == nil {
		cfg.Client = e.client
	}
	p, err := eventbridge.New(cfg)
	if err != nil {
		e.t.Fatalf("eventbridge.New: %v", err)
	}
	return p
}

type received struct {
	publishertest.Received
	Event awsfake.Event
}

// read waits until the bus holds at least n events or ctx ends, and returns
// them all as a target reads them: the detail, decoded.
func (e *env) read(ctx context.Context, bus string, n int) ([]received, error) {
	err := e.fake.Wait(ctx, func() bool { return len(e.fake.Events(bus)) >= n })
	var out []received
	for _, ev := range e.fake.Events(bus) {
		env, derr := eventbridge.Decode([]byte(ev.Detail))
		if derr != nil && !strings.Contains(ev.Detail, `"specversion"`) { // a CloudEvent is no envelope
			return out, fmt.Errorf("event %s: %w", ev.ID, derr)
		}
		out = append(out, received{Received: publishertest.Received{Topic: ev.Bus, Headers: env.Headers, Payload: env.Payload, Body: []byte(ev.Detail)}, Event: ev})
	}
	return out, err
}

func (e *env) reader(bus string) func(context.Context, int) ([]publishertest.Received, error) {
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		got, err := e.read(ctx, bus, n)
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

func throttleAll(awsfake.Call) *awsfake.CallFault {
	return &awsfake.CallFault{Status: 400, Code: "ThrottlingException"}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		e := newEnv(t)
		bus := e.createBus("orders")
		return &publishertest.Broker{
			Publisher:      e.publisher(eventbridge.Config{EventBus: bus}),
			Unroutable:     e.publisher(eventbridge.Config{EventBus: "missing"}),
			UnroutableName: "aws events create-event-bus --name missing",
			RefuseAll: func(t *testing.T) (outbox.Publisher, func()) {
				e.fake.SetFaults(awsfake.Faults{Call: throttleAll})
				return e.publisher(eventbridge.Config{EventBus: bus}), func() { e.fake.SetFaults(awsfake.Faults{}) }
			},
			MaxPayload: eventbridge.MaxEntryBytes + 1,
			TopicOf:    func(*outbox.Message) string { return bus },
			Read:       e.reader(bus),
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

// TestEventMapping: source, detail-type, time and the detail envelope, for
// every kind of JSON payload: EventBridge wants an object, the envelope is
// one whatever the payload is.
func TestEventMapping(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bus := e.createBus("b")
	p := e.publisher(eventbridge.Config{EventBus: eventbridge.DefaultEventBus})
	payloads := []string{`{"order_id":"42"}`, `[1,2,3]`, `"just a string"`, `12.5`, `null`, `true`}
	var msgs []*outbox.Message
	for _, pl := range payloads {
		m := publishertest.NewMessage("42", pl)
		m.Headers["tenant"] = "acme"
		msgs = append(msgs, m)
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("payload %s: %v", payloads[i], err)
		}
	}
	got, err := e.read(timeout(t, 10*time.Second), "default", len(msgs))
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("read %d of %d: %v", len(got), len(msgs), err)
	}
	for i, g := range got {
		m := msgs[i]
		var detail map[string]json.RawMessage
		if err := json.Unmarshal([]byte(g.Event.Detail), &detail); err != nil {
			t.Fatalf("detail %s is not a JSON object: %v", g.Event.Detail, err)
		}
		if string(g.Payload) != payloads[i] || g.Headers[outbox.HeaderEventID] != m.ID.String() || g.Headers["tenant"] != "acme" {
			t.Errorf("event %d: payload %s, headers %v; want %s and the event's headers", i, g.Payload, g.Headers, payloads[i])
		}
		if g.Event.Source != "outbox.order" || g.Event.DetailType != "order.created" || !g.Event.Time.Equal(m.CreatedAt.Truncate(time.Millisecond)) { // the SDK sends milliseconds
			t.Errorf("event %d: source %q, detail-type %q, time %v; want outbox.order, order.created, %v", i, g.Event.Source, g.Event.DetailType, g.Event.Time, m.CreatedAt)
		}
	}
	// A configured source, a template, and the bus by ARN.
	p = e.publisher(eventbridge.Config{EventBus: awsfake.EventBusARN(bus), Source: "com.example.{aggregate_type}s"})
	if err := p.Publish(timeout(t, 10*time.Second), msgs[0]); err != nil {
		t.Fatal(err)
	}
	if got, err := e.read(timeout(t, 10*time.Second), bus, 1); err != nil || got[0].Event.Source != "com.example.orders" {
		t.Errorf("source = %v, %v; want com.example.orders", got, err)
	}
	if d := p.Destination(msgs[0]); d != bus {
		t.Errorf("Destination = %q, want %q", d, bus)
	}
}

func TestBatchesOfTenAndByteLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(eventbridge.Config{})
	var msgs []*outbox.Message
	for i := range 25 {
		msgs = append(msgs, message("a", i))
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if n := e.fake.Calls("events.PutEvents"); n != 3 {
		t.Errorf("25 events took %d PutEvents calls, want 3", n)
	}
	// 100 KB events: two per call under 256 KiB.
	big := make([]*outbox.Message, 5)
	for i := range big {
		big[i] = publishertest.NewMessage("b", string(publishertest.JSONOfSize(100_000)))
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), big) {
		if err != nil {
			t.Fatalf("big event %d: %v", i, err)
		}
	}
	if n := e.fake.Calls("events.PutEvents") - 3; n != 3 {
		t.Errorf("five 100 KB events took %d calls, want 3 (at most 256 KiB per call)", n)
	}
	if got, err := e.read(timeout(t, 10*time.Second), "default", 30); err != nil || len(got) != 30 {
		t.Fatalf("read %d of 30: %v", len(got), err)
	}
}

func TestOversizedAndInvalidFailWithoutRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(eventbridge.Config{})
	m := publishertest.NewMessage("a", "{}")
	_, size, err := p.Entry(m)
	if err != nil {
		t.Fatal(err)
	}
	// The same event with a larger payload: the headers (created_at's
	// digits) are what they were.
	withPayload := func(n int) *outbox.Message {
		c := *m
		c.Payload = publishertest.JSONOfSize(n)
		return &c
	}
	overhead := size - len(m.Payload)
	if err := p.Publish(timeout(t, 10*time.Second), withPayload(eventbridge.MaxEntryBytes-overhead)); err != nil {
		t.Fatalf("an entry of exactly %d bytes: %v", eventbridge.MaxEntryBytes, err)
	}
	calls := e.fake.Calls("events.PutEvents")
	long := publishertest.NewMessage("a", "{}")
	long.EventType = strings.Repeat("t", 129)
	for name, m := range map[string]*outbox.Message{
		"one byte over":   withPayload(eventbridge.MaxEntryBytes - overhead + 1),
		"not JSON":        publishertest.NewMessage("a", `{"a":`),
		"long event type": long,
	} {
		if err := p.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) {
			t.Errorf("%s: %v, want permanent", name, err)
		}
	}
	reserved := e.publisher(eventbridge.Config{Source: "{aggregate_type}"})
	m.AggregateType = "aws.ec2"
	if err := reserved.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) || !strings.Contains(err.Error(), "reserves") {
		t.Errorf("source aws.ec2: %v, want permanent", err)
	}
	if n := e.fake.Calls("events.PutEvents") - calls; n != 0 {
		t.Errorf("%d requests sent for entries EventBridge would refuse, want none", n)
	}
}

func TestPerEntryFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(eventbridge.Config{})
	codes := map[string]string{"malformed": "MalformedDetail", "internal": "InternalFailure", "throttled": "ThrottlingException", "source": "NotAuthorizedForSourceException"}
	e.fake.SetFaults(awsfake.Faults{Entry: func(en awsfake.Entry) *awsfake.EntryFault {
		for marker, code := range codes {
			if strings.Contains(en.Body, marker) {
				return &awsfake.EntryFault{Code: code, Message: "injected by the test"}
			}
		}
		return nil
	}})
	msgs := []*outbox.Message{
		publishertest.NewMessage("a", `{"ok":1}`),
		publishertest.NewMessage("b", `{"malformed":true}`),
		publishertest.NewMessage("c", `{"internal":true}`),
		publishertest.NewMessage("d", `{"throttled":true}`),
		publishertest.NewMessage("e", `{"source":true}`),
		publishertest.NewMessage("f", `{"ok":2}`),
	}
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	if errs[0] != nil || errs[5] != nil {
		t.Errorf("good entries failed: %v, %v", errs[0], errs[5])
	}
	for i, want := range map[int]outbox.ErrorClass{1: outbox.ClassPermanent, 2: outbox.ClassTransient, 3: outbox.ClassUnavailable, 4: outbox.ClassUnavailable} {
		if c := outbox.Classify(errs[i]); errs[i] == nil || c != want {
			t.Errorf("entry %d: %v (%s), want %s", i, errs[i], c, want)
		}
	}
	got, err := e.read(timeout(t, 10*time.Second), "default", 2)
	if err != nil || len(got) != 2 || got[0].Headers[outbox.HeaderEventID] != msgs[0].ID.String() || got[1].Headers[outbox.HeaderEventID] != msgs[5].ID.String() {
		t.Fatalf("read %d events, want the 2 accepted: %v", len(got), err)
	}
}

// TestMissingBus: PutEvents to a bus that does not exist "succeeds" and the
// event is gone, so the publisher asks DescribeEventBus first; a
// SkipBusCheck publisher shows what that check prevents.
func TestMissingBus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	err := e.publisher(eventbridge.Config{EventBus: "nowhere"}).Publish(timeout(t, 10*time.Second), message("a", 1))
	var missing eventbridge.MissingBusError
	if !errors.As(err, &missing) || outbox.Classify(err) != outbox.ClassUnavailable || !strings.Contains(err.Error(), "create-event-bus --name nowhere") {
		t.Fatalf("publish to a missing bus: %v (%s), want an unavailable MissingBusError", err, outbox.Classify(err))
	}
	if n := e.fake.Calls("events.PutEvents"); n != 0 {
		t.Errorf("%d PutEvents to the missing bus, want none", n)
	}
	unchecked := e.publisher(eventbridge.Config{EventBus: "nowhere", SkipBusCheck: true})
	if err := unchecked.Publish(timeout(t, 10*time.Second), message("a", 2)); err != nil {
		t.Fatalf("SkipBusCheck: %v, want EventBridge's false success", err)
	}
	if err := unchecked.Health(timeout(t, 10*time.Second)); err != nil {
		t.Errorf("Health with SkipBusCheck: %v, want nil (no request)", err)
	}
	if n := e.fake.Calls("events.DescribeEventBus"); n != 1 {
		t.Errorf("%d DescribeEventBus calls, want 1 (SkipBusCheck makes none)", n)
	}

	// Once found, the bus is not asked about again within BusCheckInterval.
	p := e.publisher(eventbridge.Config{EventBus: e.createBus("here")})
	for i := range 3 {
		if err := p.Publish(timeout(t, 10*time.Second), message("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.fake.Calls("events.DescribeEventBus"); n != 2 {
		t.Errorf("%d DescribeEventBus calls after 3 publishes to an existing bus, want 1 more", n-1)
	}
}

func TestBusCheckRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetFaults(awsfake.Faults{Call: func(c awsfake.Call) *awsfake.CallFault {
		if c.Op == "DescribeEventBus" {
			return &awsfake.CallFault{Status: 400, Code: "AccessDeniedException"}
		}
		return nil
	}})
	p := e.publisher(eventbridge.Config{})
	err := p.Publish(timeout(t, 10*time.Second), message("a", 1))
	if outbox.Classify(err) != outbox.ClassUnavailable || !strings.Contains(err.Error(), "events:DescribeEventBus") || !strings.Contains(err.Error(), "skip_bus_check") {
		t.Errorf("DescribeEventBus refused: %v (%s), want unavailable naming the permission and the way out", err, outbox.Classify(err))
	}
	if err := e.publisher(eventbridge.Config{SkipBusCheck: true}).Publish(timeout(t, 10*time.Second), message("a", 2)); err != nil {
		t.Errorf("SkipBusCheck with DescribeEventBus refused: %v", err)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("server gone", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		p := e.publisher(eventbridge.Config{Client: newClient(e.fake.URL())})
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
		p := e.publisher(eventbridge.Config{})
		e.fake.SetFaults(awsfake.Faults{Call: func(c awsfake.Call) *awsfake.CallFault {
			if c.Op == "PutEvents" {
				return &awsfake.CallFault{Status: 500, Code: "InternalException"}
			}
			return nil
		}})
		for i, err := range p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)}) {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		client := awseventbridge.New(awseventbridge.Options{Region: awsfake.Region, BaseEndpoint: aws.String(e.fake.URL()),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{}, errors.New("no credentials configured")
			})})
		p := e.publisher(eventbridge.Config{Client: client})
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
		{"AccessDeniedException", outbox.ClassUnavailable},
		{"UnrecognizedClientException", outbox.ClassUnavailable},
		{"ThrottlingException", outbox.ClassUnavailable},
		{"ValidationException", outbox.ClassTransient}, // the request's, not the destination's
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p := e.publisher(eventbridge.Config{})
			e.fake.SetFaults(awsfake.Faults{Call: func(c awsfake.Call) *awsfake.CallFault {
				if c.Op == "PutEvents" {
					return &awsfake.CallFault{Status: 400, Code: tc.code}
				}
				return nil
			}})
			err := p.Publish(timeout(t, 10*time.Second), message("a", 1))
			if err == nil || outbox.Classify(err) != tc.want || !strings.Contains(err.Error(), tc.code) {
				t.Fatalf("err = %v (%s), want %s naming %s", err, outbox.Classify(err), tc.want, tc.code)
			}
		})
	}
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming eventbridge.Config and the field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := newClient("http://127.0.0.1:1")
	for _, tc := range []struct {
		cfg   eventbridge.Config
		field string
	}{
		{eventbridge.Config{}, "Client"},
		{eventbridge.Config{Client: awseventbridge.New(awseventbridge.Options{})}, "Client"},
		{eventbridge.Config{Client: c, EventBus: "arn:aws:sns:eu-west-1:1:t"}, "EventBus"},
		{eventbridge.Config{Client: c, EventBus: "has space"}, "EventBus"},
		{eventbridge.Config{Client: c, Source: "aws.orders"}, "Source"},
		{eventbridge.Config{Client: c, Source: "{nope}"}, "Source"},
		{eventbridge.Config{Client: c, Concurrency: 101}, "Concurrency"},
	} {
		_, err := eventbridge.New(tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "eventbridge.Config", tc.field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultEventBus":    eventbridge.DefaultEventBus,
		"DefaultSource":      eventbridge.DefaultSource,
		"DefaultConcurrency": eventbridge.DefaultConcurrency,
	})
}

// Not parallel: it sets the AWS environment for the default credential chain.
func TestNewFromURL(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	e := newEnv(t)
	bus := e.createBus("orders")
	u := &url.URL{Scheme: "eventbridge", RawQuery: url.Values{"bus": {awsfake.EventBusARN(bus)}, "source": {"com.example"},
		"endpoint": {e.fake.URL()}, "concurrency": {"2"}}.Encode()}
	p, err := eventbridge.NewFromURL(u)
	if err != nil {
		t.Fatalf("NewFromURL(%s): %v", u, err)
	}
	m := message("a", 1)
	if err := p.Publish(timeout(t, 10*time.Second), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got, err := e.read(timeout(t, 10*time.Second), bus, 1); err != nil || got[0].Headers[outbox.HeaderEventID] != m.ID.String() || got[0].Event.Source != "com.example" {
		t.Fatalf("read %v, %v", got, err)
	}
	for _, s := range []string{
		"eventbridge://?bus=x&nope=1",
		"eventbridge://AKID:secret@?bus=x",
		"eventbridge://orders",
		"eventbridge://?endpoint=localhost:1",
		"eventbridge://?skip_bus_check=maybe",
		"eventbridge://?source=aws.x",
		"sqs://?bus=x",
	} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eventbridge.NewFromURL(u); err == nil {
			t.Errorf("NewFromURL(%s) = nil error", s)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error repeats the secret: %v", err)
		}
	}
}
