package envelope_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/envelope"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	h := map[string]string{"outbox-event-id": "e1", "tenant": `a"b`}
	for _, p := range []string{`{"a":1}`, `  {"spaces" :  true }  `, `[1,2]`, `"text"`, `42`, `null`, `{"payload":"x}"}`} {
		data, err := envelope.Encode(h, []byte(p))
		if err != nil {
			t.Fatalf("Encode(%s): %v", p, err)
		}
		if n, err := envelope.Size(h, len(p)); err != nil || n != len(data) {
			t.Errorf("Size = %d, %v; Encode wrote %d bytes", n, err, len(data))
		}
		if !json.Valid(data) {
			t.Fatalf("envelope of %s is not JSON: %s", p, data)
		}
		e, err := envelope.Decode(data)
		if err != nil || string(e.Payload) != p || e.Headers["tenant"] != `a"b` || e.Headers["outbox-event-id"] != "e1" {
			t.Errorf("Decode(Encode(%q)) = %+v (payload %q), %v", p, e, e.Payload, err)
		}
	}
}

// An envelope a JSON parser re-encoded (keys reordered, spaces changed)
// still decodes, to the payload's value.
func TestDecodeReencoded(t *testing.T) {
	t.Parallel()
	e, err := envelope.Decode([]byte(`{ "payload" : {"b": 2, "a": 1}, "headers": {"outbox-event-id": "e1"} }`))
	if err != nil || string(e.Payload) != `{"b": 2, "a": 1}` || e.Headers["outbox-event-id"] != "e1" {
		t.Errorf("Decode = %+v, %v", e, err)
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	if _, err := envelope.Encode(nil, []byte(`{"a":`)); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("Encode of invalid JSON: %v", err)
	}
	for _, s := range []string{`{"a":1}`, `[]`, `{"headers":{}}`, `nope`} {
		if _, err := envelope.Decode([]byte(s)); err == nil || !strings.Contains(err.Error(), "not an outbox envelope") {
			t.Errorf("Decode(%s): %v", s, err)
		}
	}
	data, _ := envelope.Encode(map[string]string{}, []byte(`{}`))
	if !bytes.HasPrefix(data, []byte(`{"headers":{}`)) {
		t.Errorf("envelope = %s", data)
	}
}
