// Package envelope is the JSON document the eventbridge and kinesis
// publishers send, for destinations that carry no headers of their own (a
// Kinesis record is bytes and a partition key; an EventBridge detail is one
// JSON object):
//
//	{"headers":{"outbox-event-id":"...","outbox-event-type":"...",...},"payload":<the payload>}
//
// headers holds outbox.Message.StandardHeaders (the five standard headers
// and the row's own); payload is the event's payload, its bytes embedded
// verbatim as the last member, so Decode gives them back byte for byte.
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pgoutbox/outbox/outboxtype"
)

// Envelope is a decoded envelope.
type Envelope struct {
	// Headers are the event's headers: outbox-event-id (the consumer's
	// dedup key), outbox-event-type, outbox-aggregate-type,
	// outbox-aggregate-id, outbox-created-at and the row's own.
	Headers map[string]string
	// Payload is the event's payload.
	Payload json.RawMessage
}

const payloadKey = `,"payload":`

// Encode returns the envelope of headers and payload. The payload must be
// valid JSON: the envelope is JSON.
func Encode(headers map[string]string, payload []byte) ([]byte, error) {
	if !json.Valid(payload) {
		return nil, errors.New("the payload is not valid JSON")
	}
	h, err := json.Marshal(headers)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(`{"headers":`)+len(h)+len(payloadKey)+len(payload)+1)
	out = append(out, `{"headers":`...)
	out = append(out, h...)
	out = append(out, payloadKey...)
	out = append(out, payload...)
	return append(out, '}'), nil
}

// Body returns what msg becomes, in msg.Envelope: the envelope of its
// standard headers and payload, or, with either CloudEvents envelope, the
// JSON event format (structured content mode: neither destination has
// headers for binary mode).
func Body(msg *outboxtype.Message) ([]byte, error) {
	if msg.Envelope.CloudEvents() {
		return msg.StructuredCloudEvent()
	}
	return Encode(msg.StandardHeaders(), msg.Payload)
}

// Size is the length of Encode's result, without encoding the payload.
func Size(headers map[string]string, payloadLen int) (int, error) {
	h, err := json.Marshal(headers)
	if err != nil {
		return 0, err
	}
	return len(`{"headers":`) + len(h) + len(payloadKey) + payloadLen + 1, nil
}

// Decode reads an envelope. An envelope as Encode wrote it gives back the
// payload's bytes exactly; one that went through a JSON parser on the way
// (an EventBridge target receives the detail re-encoded) gives back the
// payload's JSON value.
func Decode(data []byte) (Envelope, error) {
	var e struct {
		Headers map[string]string `json:"headers"`
		Payload json.RawMessage   `json:"payload"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return Envelope{}, fmt.Errorf("not an outbox envelope: %w", err)
	}
	if e.Headers == nil || e.Payload == nil {
		return Envelope{}, errors.New(`not an outbox envelope: want {"headers":{...},"payload":...}`)
	}
	out := Envelope{Headers: e.Headers, Payload: e.Payload}
	// As Encode writes it: {"headers":H,"payload":P} with P verbatim.
	if rest, ok := bytes.CutPrefix(data, []byte(`{"headers":`)); ok {
		var h json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(rest))
		if dec.Decode(&h) == nil {
			rest = rest[dec.InputOffset():]
			if p, ok := bytes.CutPrefix(rest, []byte(payloadKey)); ok && len(p) > 0 && p[len(p)-1] == '}' {
				if p = p[:len(p)-1]; json.Valid(p) && bytes.Equal(bytes.TrimSpace(p), e.Payload) {
					out.Payload = p
				}
			}
		}
	}
	return out, nil
}
