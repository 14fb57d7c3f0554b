package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

func TestBlockedReason(t *testing.T) {
	t.Parallel()
	for addr, blocked := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "10.0.0.1": true, "172.16.5.4": true, "192.168.1.1": true,
		"169.254.169.254": true, "fe80::1": true, "0.0.0.0": true, "::": true, "0.1.2.3": true, "100.64.0.1": true,
		"100.127.255.254": true, "224.0.0.1": true, "239.1.1.1": true, "ff02::1": true, "255.255.255.255": true,
		"fc00::1": true, "fd12:3456::1": true, "::ffff:10.0.0.1": true, "::ffff:169.254.169.254": true,
		"64:ff9b::a00:1": true, "198.18.0.1": true, "192.0.2.1": true,
		"8.8.8.8": false, "1.1.1.1": false, "100.128.0.1": false, "2606:4700:4700::1111": false, "172.32.0.1": false,
	} {
		if got := blockedReason(netip.MustParseAddr(addr)) != ""; got != blocked {
			t.Errorf("%s: blocked = %t, want %t", addr, got, blocked)
		}
	}
}

// TestDefaultRefusesNonPublicTargets publishes, with the default config, to
// addresses the SSRF policy refuses. The dialer's Control hook rejects each
// before connect(2), so nothing is sent; a guard placed after the policy
// fails the test, without connecting, if a non-loopback dial ever got past it.
func TestDefaultRefusesNonPublicTargets(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().String()
	port = port[strings.LastIndexByte(port, ':')+1:]

	for _, target := range []string{
		srv.URL + "/hook",                    // 127.0.0.1, a live server
		"http://localhost:" + port + "/hook", // a name resolving to loopback
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/hook",
		"http://[fd00::1]/hook",
		"http://100.64.0.1/hook",
		"http://0.0.0.0:" + port + "/hook",
	} {
		p, err := New(Config{URL: target, Secrets: []string{testSecret}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var leaked atomic.Value
		p.dialGuard = func(ap netip.AddrPort) error {
			if !ap.Addr().IsLoopback() {
				leaked.Store(ap.String())
				return fmt.Errorf("test guard: refusing to dial %s", ap)
			}
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = p.Publish(ctx, &outbox.Message{ID: uuid.New(), EventType: "e", AggregateType: "a", AggregateID: "1", Payload: []byte(`{}`)})
		cancel()
		if v := leaked.Load(); v != nil {
			t.Errorf("%s: the SSRF policy let a dial to %s through", target, v)
		}
		// The configured endpoint refused: every event would be, so it is
		// an outage, not this event's failure.
		if !errors.Is(err, ErrBlockedAddress) || outbox.Classify(err) != outbox.ClassUnavailable {
			t.Errorf("%s: err = %v (%s), want an unavailable ErrBlockedAddress", target, err, outbox.Classify(err))
		}
		if h := p.Health(ctx); !errors.Is(h, ErrBlockedAddress) {
			t.Errorf("%s: Health = %v, want the refusal", target, h)
		}
		// The way out for a library user and for the outbox command's.
		if err != nil && (!strings.Contains(err.Error(), "Config.AllowPrivateNetworks") || !strings.Contains(err.Error(), "outbox_allow_private_networks=true")) {
			t.Errorf("%s: err = %v, want it to name Config.AllowPrivateNetworks and the URL option", target, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback server received %d requests", n)
	}
}

// testSecret is a Standard Webhooks secret: base64 of 24 bytes.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A host taken from the event is that event's: its refusal is permanent,
// and another event's host is still reached.
func TestRefusedEventHostIsPermanent(t *testing.T) {
	t.Parallel()
	p, err := New(Config{URL: "http://{aggregate_id}/hook", Secrets: []string{testSecret}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.dialGuard = func(ap netip.AddrPort) error { return fmt.Errorf("test guard: refusing to dial %s", ap) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.Publish(ctx, &outbox.Message{ID: uuid.New(), EventType: "e", AggregateType: "a", AggregateID: "10.1.2.3", Payload: []byte(`{}`)})
	if !errors.Is(err, ErrBlockedAddress) || outbox.Classify(err) != outbox.ClassPermanent {
		t.Errorf("event host refused: %v (%s), want a permanent ErrBlockedAddress", err, outbox.Classify(err))
	}
	if h := p.Health(ctx); h != nil {
		t.Errorf("Health = %v after one event's host was refused, want nil", h)
	}
}
