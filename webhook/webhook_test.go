package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/webhook"
)

const testSecret = "whsec_cGdvdXRib3gtdGVzdC1zZWNyZXQ=" // base64("pgoutbox-test-secret")

// receiver is an httptest endpoint recording every request it accepts,
// after checking the signature as a consumer would.
type receiver struct {
	t       *testing.T
	srv     *httptest.Server
	secrets []string

	mu      sync.Mutex
	got     []publishertest.Received
	raw     []*http.Request
	hits    int
	changed chan struct{}
	// respond, if set, may answer instead of 204: it returns 0 to accept,
	// a status to send, or -1 when it wrote the answer itself.
	respond func(w http.ResponseWriter, r *http.Request, body []byte) int
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{t: t, secrets: []string{testSecret}, changed: make(chan struct{})}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.hits++
	respond := rc.respond
	rc.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.URL.Path == "/missing" {
		http.NotFound(w, r)
		return
	}
	if respond != nil {
		switch code := respond(w, r, body); {
		case code > 0:
			w.WriteHeader(code)
			return
		case code < 0: // answered by respond
			return
		}
	}
	if err := webhook.Verify(rc.secrets, r.Header, body, time.Minute); err != nil {
		rc.t.Errorf("receiver: %s: signature check: %v", r.URL.Path, err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	h := map[string]string{}
	for k := range r.Header {
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, webhook.HeaderRowPrefix):
			h[strings.TrimPrefix(lk, webhook.HeaderRowPrefix)] = r.Header.Get(k)
		case strings.HasPrefix(lk, "outbox-"), strings.HasPrefix(lk, webhook.HeaderCloudEventsPrefix), lk == "content-type":
			h[lk] = r.Header.Get(k)
		}
	}
	rc.mu.Lock()
	rc.got = append(rc.got, publishertest.Received{Topic: r.URL.Path, DedupID: r.Header.Get(webhook.HeaderID), Headers: h, Payload: body})
	rc.raw = append(rc.raw, r)
	close(rc.changed)
	rc.changed = make(chan struct{})
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Read waits until n requests were accepted or ctx ends.
func (rc *receiver) Read(ctx context.Context, n int) ([]publishertest.Received, error) {
	for {
		rc.mu.Lock()
		got, changed := slices.Clone(rc.got), rc.changed
		rc.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

func (rc *receiver) requests() []*http.Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.raw)
}

func (rc *receiver) hitCount() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.hits
}

func newPublisher(t *testing.T, cfg webhook.Config) *webhook.Publisher {
	t.Helper()
	if cfg.Secrets == nil {
		cfg.Secrets = []string{testSecret}
	}
	cfg.AllowPrivateNetworks = true // httptest listens on loopback
	p, err := webhook.New(cfg)
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

const maxBody = 64 << 10

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		rc := newReceiver(t)
		proxy := tcpproxy.Start(t, rc.srv.Listener.Addr().String())
		base := "http://" + proxy.Addr()
		return &publishertest.Broker{
			Publisher:            newPublisher(t, webhook.Config{URL: base + "/hooks/{event_type}", MaxBodyBytes: maxBody, Timeout: 2 * time.Second}),
			Unroutable:           newPublisher(t, webhook.Config{URL: base + "/missing"}),
			UnroutablePerMessage: true, // a 404 answers for one URL of a template
			RefuseAll:            refusingEndpoint,
			MaxPayload:           maxBody + 1,
			TopicOf:              func(m *outbox.Message) string { return "/hooks/" + m.EventType },
			Read:                 rc.Read,
			Disconnect: func(t *testing.T) func() {
				proxy.Cut()
				return proxy.Restore
			},
			CloudEvents: &publishertest.CloudEvents{Prefix: "ce-", PercentEncoded: true, ContentType: "content-type"},
		}
	})
}

func message(agg string, i int) *outbox.Message {
	return publishertest.NewMessage(agg, fmt.Sprintf(`{"agg":%q,"i":%d}`, agg, i))
}

func TestSignatureVectors(t *testing.T) {
	t.Parallel()
	t.Run("Standard Webhooks specification", func(t *testing.T) {
		const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
		secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id, ts, body := "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`)
		got, err := webhook.Signature([]string{secret}, id, ts, body)
		if err != nil || got != want {
			t.Fatalf("Signature = %q, %v; want %q", got, err, want)
		}
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, "1614265330")
		h.Set(webhook.HeaderSignature, want)
		if err := webhook.VerifyAt(ts.Add(10*time.Second), []string{secret}, h, body, 0); err != nil {
			t.Fatalf("VerifyAt: %v", err)
		}
	})
	t.Run("independent", func(t *testing.T) {
		// Computed outside Go (Python's hmac) from key "pgoutbox-test-secret",
		// content "evt_1.1700000000.{\"a\":1}".
		const want = "v1,1nw92K2bhTKMVDG1p9WzF3up39MNO4GiJ9tnWsalqpY="
		id, body := "evt_1", []byte(`{"a":1}`)
		m := hmac.New(sha256.New, []byte("pgoutbox-test-secret"))
		m.Write([]byte(id + ".1700000000." + string(body)))
		if byHand := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); byHand != want {
			t.Fatalf("the test's own HMAC %q differs from the vector %q", byHand, want)
		}
		for _, secret := range []string{testSecret, "pgoutbox-test-secret"} { // whsec_ form and raw bytes
			got, err := webhook.Signature([]string{secret}, id, time.Unix(1700000000, 0), body)
			if err != nil || got != want {
				t.Errorf("Signature with %.10s… = %q, %v; want %q", secret, got, err, want)
			}
		}
	})
}

func TestVerify(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := testSecret, "whsec_"+base64.StdEncoding.EncodeToString([]byte("the-next-secret-0123456789abcdef"))
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"order":42}`)
	headers := func(secrets []string, id string, ts time.Time, b []byte) http.Header {
		sig, err := webhook.Signature(secrets, id, ts, b)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, fmt.Sprint(ts.Unix()))
		h.Set(webhook.HeaderSignature, sig)
		return h
	}
	rotated := headers([]string{oldSecret, newSecret}, "evt_1", now, body)
	if n := len(strings.Fields(rotated.Get(webhook.HeaderSignature))); n != 2 {
		t.Fatalf("two secrets gave %d signatures", n)
	}
	for _, tc := range []struct {
		name    string
		secrets []string
		h       http.Header
		body    []byte
		want    error
	}{
		{"rotation, receiver has the old secret", []string{oldSecret}, rotated, body, nil},
		{"rotation, receiver has the new secret", []string{newSecret}, rotated, body, nil},
		{"receiver with both secrets, sender with one", []string{newSecret, oldSecret}, headers([]string{oldSecret}, "evt_1", now, body), body, nil},
		{"wrong secret", []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("another"))}, rotated, body, webhook.ErrNoMatch},
		{"body altered", []string{oldSecret}, rotated, []byte(`{"order":43}`), webhook.ErrNoMatch},
		{"id altered", []string{oldSecret}, func() http.Header { h := rotated.Clone(); h.Set(webhook.HeaderID, "evt_2"); return h }(), body, webhook.ErrNoMatch},
		{"timestamp altered", []string{oldSecret}, func() http.Header {
			h := rotated.Clone()
			h.Set(webhook.HeaderTimestamp, fmt.Sprint(now.Unix()+1))
			return h
		}(), body, webhook.ErrNoMatch},
		{"too old", []string{oldSecret}, headers([]string{oldSecret}, "evt_1", now.Add(-6*time.Minute), body), body, webhook.ErrTimestamp},
		{"too new", []string{oldSecret}, headers([]string{oldSecret}, "evt_1", now.Add(6*time.Minute), body), body, webhook.ErrTimestamp},
		{"bad timestamp", []string{oldSecret}, func() http.Header { h := rotated.Clone(); h.Set(webhook.HeaderTimestamp, "soon"); return h }(), body, webhook.ErrTimestamp},
		{"missing signature", []string{oldSecret}, func() http.Header { h := rotated.Clone(); h.Del(webhook.HeaderSignature); return h }(), body, webhook.ErrMissingHeaders},
		{"other scheme versions only", []string{oldSecret}, func() http.Header {
			h := rotated.Clone()
			h.Set(webhook.HeaderSignature, strings.ReplaceAll(h.Get(webhook.HeaderSignature), "v1,", "v1a,"))
			return h
		}(), body, webhook.ErrNoMatch},
	} {
		err := webhook.VerifyAt(now, tc.secrets, tc.h, tc.body, 5*time.Minute)
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := webhook.VerifyAt(now, []string{"whsec_%%%"}, rotated, body, 0); err == nil || strings.Contains(err.Error(), "%%%") {
		t.Errorf("bad secret: err = %v, want an error not repeating the secret", err)
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/in/{aggregate_type}/{aggregate_id}?type={event_type}",
		Header: http.Header{"Authorization": {"Bearer receiver-token"}}})
	m := message("a/b c?", 1)
	if err := p.Publish(timeout(t, 10*time.Second), m); err != nil {
		t.Fatal(err)
	}
	r := rc.requests()[0]
	got, _ := rc.Read(timeout(t, time.Second), 1)
	for k, want := range map[string]string{
		"Content-Type": "application/json", "Authorization": "Bearer receiver-token", "User-Agent": webhook.DefaultUserAgent,
		webhook.HeaderID: m.ID.String(), "Idempotency-Key": m.ID.String(), "Outbox-Event-Id": m.ID.String(), "Outbox-Aggregate-Id": "a/b c?",
		"Outbox-Header-Tenant": "acme", "Outbox-Created-At": m.CreatedAt.Format(time.RFC3339Nano),
	} {
		if v := r.Header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if ts := r.Header.Get(webhook.HeaderTimestamp); ts == "" || len(ts) < 10 {
		t.Errorf("webhook-timestamp = %q", ts)
	}
	if r.URL.EscapedPath() != "/in/order/a%2Fb%20c%3F" || r.URL.Query().Get("type") != "order.created" {
		t.Errorf("request URL %s: the template's values are not escaped into one segment", r.URL)
	}
	if string(got[0].Payload) != string(m.Payload) {
		t.Errorf("body %q, want %q", got[0].Payload, m.Payload)
	}
}

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	var target sync.Map // path -> hits at the redirect target
	rc.respond = func(w http.ResponseWriter, r *http.Request, _ []byte) int {
		if r.URL.Path == "/moved-here" {
			n, _ := target.LoadOrStore("hits", new(int))
			*(n.(*int))++
			return 0
		}
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/status/"), &code)
		switch r.URL.Query().Get("retry") {
		case "seconds":
			w.Header().Set("Retry-After", "7")
		case "date":
			w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
		case "junk":
			w.Header().Set("Retry-After", "later")
		}
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/moved-here")
		}
		if code >= 400 {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(code)
			io.WriteString(w, "reason from\r\nthe receiver")
			return -1
		}
		return code
	}
	for _, tc := range []struct {
		path      string
		class     outbox.ErrorClass // ignored when ok
		ok        bool
		delay     time.Duration // wanted Retry-After, 0: none
		inMessage string
	}{
		{path: "/status/200", ok: true},
		{path: "/status/201", ok: true},
		{path: "/status/202", ok: true},
		{path: "/status/301", class: outbox.ClassPermanent, inMessage: "/moved-here"},
		{path: "/status/302", class: outbox.ClassPermanent, inMessage: "not followed"},
		{path: "/status/307", class: outbox.ClassPermanent, inMessage: "/moved-here"},
		{path: "/status/308", class: outbox.ClassPermanent, inMessage: "/moved-here"},
		{path: "/status/400", class: outbox.ClassPermanent, inMessage: "reason from the receiver"},
		{path: "/status/401", class: outbox.ClassUnavailable, inMessage: "401"},
		{path: "/status/403", class: outbox.ClassUnavailable},
		{path: "/status/404", class: outbox.ClassPermanent},
		{path: "/status/410", class: outbox.ClassPermanent},
		{path: "/status/413", class: outbox.ClassPermanent},
		{path: "/status/422", class: outbox.ClassPermanent},
		{path: "/status/408", class: outbox.ClassTransient},
		{path: "/status/429", class: outbox.ClassUnavailable},
		{path: "/status/429?retry=seconds", class: outbox.ClassUnavailable, delay: 7 * time.Second},
		{path: "/status/503?retry=date", class: outbox.ClassUnavailable, delay: 90 * time.Second},
		{path: "/status/503?retry=junk", class: outbox.ClassUnavailable},
		{path: "/status/500", class: outbox.ClassTransient},
		{path: "/status/502", class: outbox.ClassUnavailable},
	} {
		p := newPublisher(t, webhook.Config{URL: rc.srv.URL + tc.path})
		// One request alone: an answer refusing everything (401, 403,
		// 429, 502, 503) is an outage. TestRefusalsBesideASuccess has them
		// beside a request that got through.
		err := p.Publish(timeout(t, 10*time.Second), message("a", 1))
		if tc.ok {
			if err != nil {
				t.Errorf("%s: %v, want success", tc.path, err)
			}
			continue
		}
		if err == nil || outbox.Classify(err) != tc.class {
			t.Errorf("%s: err = %v (%s), want %s", tc.path, err, outbox.Classify(err), tc.class)
			continue
		}
		if !strings.Contains(err.Error(), tc.inMessage) {
			t.Errorf("%s: err = %q, want it to contain %q", tc.path, err, tc.inMessage)
		}
		d, ok := outbox.RequestedDelay(err)
		switch {
		case tc.delay == 0 && ok:
			t.Errorf("%s: requested delay %s, want none", tc.path, d)
		case tc.delay != 0 && (!ok || d < tc.delay-2*time.Second || d > tc.delay):
			t.Errorf("%s: requested delay %s (%t), want about %s", tc.path, d, ok, tc.delay)
		}
	}
	if _, followed := target.Load("hits"); followed {
		t.Error("a redirect was followed")
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t)
		p := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/x"})
		rc.srv.Close()
		errs := p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)})
		for i, err := range errs {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
	})
	t.Run("endpoint hangs", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rc.respond = func(_ http.ResponseWriter, r *http.Request, _ []byte) int {
			if strings.Contains(r.URL.Path, "slow") {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			return 0
		}
		slow := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/slow/{aggregate_id}", Timeout: 200 * time.Millisecond})
		start := time.Now()
		errs := slow.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("a", 1), message("b", 2)})
		for i, err := range errs {
			if outbox.Classify(err) != outbox.ClassUnavailable {
				t.Errorf("whole batch timing out, message %d: %v (%s), want unavailable", i, err, outbox.Classify(err))
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %s with a 200ms request timeout", d)
		}
		// One aggregate slow, one fine: the endpoint is up; the slow one is
		// a transient failure.
		mixed := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/{aggregate_id}", Timeout: 200 * time.Millisecond})
		errs = mixed.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("slow", 1), message("fast", 2)})
		if errs[1] != nil || errs[0] == nil || outbox.Classify(errs[0]) != outbox.ClassTransient {
			t.Errorf("mixed batch: %v, %v; want a transient timeout and a success", errs[0], errs[1])
		}
	})
}

func TestOversizedIsPermanentWithoutRequest(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/x", MaxBodyBytes: 100})
	m := publishertest.NewMessage("a", string(publishertest.JSONOfSize(101)))
	if err := p.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) || !strings.Contains(err.Error(), "MaxBodyBytes") {
		t.Fatalf("err = %v, want permanent", err)
	}
	if n := rc.hitCount(); n != 0 {
		t.Fatalf("%d requests reached the receiver", n)
	}
}

func TestAggregateOrderAndStopAfterFailure(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	rc.respond = func(_ http.ResponseWriter, _ *http.Request, body []byte) int {
		if strings.Contains(string(body), `"agg":"bad","i":2}`) {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	p := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/x", Concurrency: 4})
	var msgs []*outbox.Message
	for i := range 10 {
		for _, a := range []string{"a", "b", "c", "bad"} {
			msgs = append(msgs, message(a, i))
		}
	}
	errs := p.PublishBatch(timeout(t, 30*time.Second), msgs)
	for i, err := range errs {
		m := msgs[i]
		var n int
		fmt.Sscanf(string(m.Payload[strings.Index(string(m.Payload), `"i":`)+4:]), "%d", &n)
		switch {
		case m.AggregateID != "bad" || n < 2:
			if err != nil {
				t.Errorf("%s %d: %v", m.AggregateID, n, err)
			}
		case n == 2:
			if err == nil || !strings.Contains(err.Error(), "503") {
				t.Errorf("bad 2: %v, want the 503", err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "earlier event") || outbox.Classify(err) != outbox.ClassTransient {
				t.Errorf("bad %d: %v (%s), want a transient 'not sent'", n, err, outbox.Classify(err))
			}
		}
	}
	got, _ := rc.Read(timeout(t, time.Second), 32)
	last := map[string]int{}
	for _, r := range got {
		agg := r.Headers[outbox.HeaderAggregateID]
		var n int
		fmt.Sscanf(string(r.Payload[strings.Index(string(r.Payload), `"i":`)+4:]), "%d", &n)
		if prev, ok := last[agg]; ok && n < prev {
			t.Errorf("aggregate %s: event %d arrived after event %d", agg, n, prev)
		}
		last[agg] = n
	}
	if len(got) != 32 {
		t.Errorf("receiver accepted %d, want 32", len(got))
	}
}

func TestInvalidHeaderIsPermanent(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	p := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/x"})
	m := message("a", 1)
	m.Headers = map[string]string{"bad": "line\r\nInjected: yes"}
	if err := p.Publish(timeout(t, 10*time.Second), m); !errors.Is(err, outbox.ErrPermanent) {
		t.Fatalf("err = %v, want permanent", err)
	}
	if n := rc.hitCount(); n != 0 {
		t.Fatalf("%d requests reached the receiver", n)
	}
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming webhook.Config and the field, and never repeats a secret.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	s := []string{testSecret}
	for _, tc := range []struct {
		cfg  webhook.Config
		want string
	}{
		{webhook.Config{Secrets: s}, "Config.URL"},
		{webhook.Config{URL: "ftp://h/x", Secrets: s}, "Config.URL"},
		{webhook.Config{URL: "https:///x", Secrets: s}, "Config.URL"},
		{webhook.Config{URL: "https://u:p@h/x", Secrets: s}, "Config.URL"},
		{webhook.Config{URL: "https://h/{nope}", Secrets: s}, "Config.URL"},
		{webhook.Config{URL: "https://h/x"}, "Config.Secrets"},
		{webhook.Config{URL: "https://h/x", Secrets: []string{""}}, "Config.Secrets"},
		{webhook.Config{URL: "https://h/x", Secrets: []string{"whsec_!!"}}, "Config.Secrets"},
		{webhook.Config{URL: "https://h/x", Secrets: []string{"foo"}}, `Config.Secrets: secret 1: 3 bytes and no "whsec_" prefix`},
		{webhook.Config{URL: "https://h/x", Secrets: []string{testSecret, "whsec_Zm9vYmFy"}}, "Config.Secrets: secret 2: its key is 6 bytes, want at least 16"},
		{webhook.Config{URL: "https://h/x", Secrets: s, Timeout: -1}, "Config.Timeout"},
		{webhook.Config{URL: "https://h/x", Secrets: s, MaxBodyBytes: -1}, "Config.MaxBodyBytes"},
		{webhook.Config{URL: "https://h/x", Secrets: s, Concurrency: 1000}, "Config.Concurrency"},
		{webhook.Config{URL: "https://h/x", Secrets: s, Header: http.Header{"Webhook-Signature": {"x"}}}, "Config.Header"},
		{webhook.Config{URL: "https://h/x", Secrets: s, Header: http.Header{"X-Token": {"a\nb"}}}, "Config.Header"},
	} {
		_, err := webhook.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
		field, _, _ := strings.Cut(strings.TrimPrefix(tc.want, "Config."), ":")
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "webhook.Config", field)
		if err != nil && (strings.Contains(err.Error(), "!!") || strings.Contains(err.Error(), "Zm9vYmFy") || strings.Contains(err.Error(), `"foo"`)) {
			t.Errorf("error repeats the secret: %v", err)
		}
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultTimeout":      webhook.DefaultTimeout,
		"DefaultMaxBodyBytes": webhook.DefaultMaxBodyBytes,
		"DefaultConcurrency":  webhook.DefaultConcurrency,
		"DefaultUserAgent":    webhook.DefaultUserAgent,
	})
}

// Not parallel: it sets the secret's environment variable.
func TestNewFromURL(t *testing.T) {
	t.Setenv("TEST_WEBHOOK_SECRETS", testSecret+" whsec_"+base64.StdEncoding.EncodeToString([]byte("the-second-secret-key")))
	rc := newReceiver(t)
	u, err := url.Parse(rc.srv.URL + "/hooks/{event_type}?keep=1&outbox_timeout=3s&outbox_allow_private_networks=true&outbox_secret_env=TEST_WEBHOOK_SECRETS&outbox_concurrency=2")
	if err != nil {
		t.Fatal(err)
	}
	p, err := webhook.NewFromURL(u)
	if err != nil {
		t.Fatalf("NewFromURL: %v", err)
	}
	defer p.Close()
	m := message("a", 1)
	if got := p.URL(m); got != rc.srv.URL+"/hooks/order.created?keep=1" {
		t.Errorf("URL = %q", got)
	}
	if err := p.Publish(timeout(t, 10*time.Second), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if sigs := strings.Fields(rc.requests()[0].Header.Get(webhook.HeaderSignature)); len(sigs) != 2 {
		t.Errorf("%d signatures, want one per secret in the environment variable", len(sigs))
	}

	for _, s := range []string{
		rc.srv.URL + "/x?outbox_nope=1&outbox_secret_env=TEST_WEBHOOK_SECRETS",
		rc.srv.URL + "/x?outbox_timeout=soon&outbox_secret_env=TEST_WEBHOOK_SECRETS",
		rc.srv.URL + "/x?outbox_secret_env=TEST_WEBHOOK_UNSET",
		"ftp://h/x?outbox_secret_env=TEST_WEBHOOK_SECRETS",
	} {
		u, _ := url.Parse(s)
		if _, err := webhook.NewFromURL(u); err == nil {
			t.Errorf("NewFromURL(%s) = nil error", s)
		} else if strings.Contains(err.Error(), "cGdvdXRib3gt") {
			t.Errorf("error repeats a secret: %v", err)
		}
	}
	// OUTBOX_WEBHOOK_SECRET=foo: not a secret, refused at construction.
	u, _ = url.Parse("https://hooks.example.com/x")
	_, err = webhook.NewFromURLEnv(u, func(string) string { return "foo" })
	if err == nil || !strings.Contains(err.Error(), `Config.Secrets: secret 1: 3 bytes and no "whsec_" prefix`) {
		t.Errorf("NewFromURL with OUTBOX_WEBHOOK_SECRET=foo: %v, want a refusal naming the format", err)
	}
}

// refusingEndpoint is an endpoint answering 503 to every request until
// restored.
func refusingEndpoint(t *testing.T) (outbox.Publisher, func()) {
	var ok atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ok.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	return newPublisher(t, webhook.Config{URL: srv.URL + "/hooks"}), func() { ok.Store(true) }
}

// Beside a request that got through, the endpoint is answering: a 401 or
// 403 is that message's permanent failure, a 503 or 429 a transient one.
func TestRefusalsBesideASuccess(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	rc.respond = func(w http.ResponseWriter, r *http.Request, _ []byte) int {
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/status/"), &code)
		if code >= 400 {
			w.WriteHeader(code)
			return -1
		}
		return code
	}
	p := newPublisher(t, webhook.Config{URL: rc.srv.URL + "/status/{aggregate_id}"})
	for code, want := range map[string]outbox.ErrorClass{
		"401": outbox.ClassPermanent, "403": outbox.ClassPermanent, "503": outbox.ClassTransient, "429": outbox.ClassTransient,
	} {
		errs := p.PublishBatch(timeout(t, 10*time.Second), []*outbox.Message{message("200", 1), message(code, 1), message(code, 2)})
		if errs[0] != nil {
			t.Fatalf("%s: the accepted request: %v", code, errs[0])
		}
		if c := outbox.Classify(errs[1]); errs[1] == nil || c != want {
			t.Errorf("%s beside a success: %v (%s), want %s", code, errs[1], c, want)
		}
		// Its successor in the aggregate was never sent: never permanent.
		if c := outbox.Classify(errs[2]); errs[2] == nil || c != outbox.ClassTransient {
			t.Errorf("%s: the aggregate's next event, not sent: %v (%s), want transient", code, errs[2], c)
		}
	}
}
