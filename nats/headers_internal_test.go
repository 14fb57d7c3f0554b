package nats

import "testing"

// TestHeaderName: a row's header name reaches NATS only if consumers can
// parse it back (nats.go reads headers as MIME headers, and refuses a
// message whose header line has an empty name or one with a colon, a
// space or a non-ASCII byte).
func TestHeaderName(t *testing.T) {
	for k, want := range map[string]bool{
		"traceparent": true, "X-Request-Id": true, "a.b_c~d": true, "outbox-event-id": true,
		"": false, "bad key:": false, "a:b": false, "a b": false, "ü": false, "tab\t": false, "cr\r": false,
	} {
		if got := headerName(k); got != want {
			t.Errorf("headerName(%q) = %v, want %v", k, got, want)
		}
	}
}
