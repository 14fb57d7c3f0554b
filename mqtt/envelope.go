package mqtt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pgoutbox/outbox"
)

// MQTT 3.1.1 has no message headers, so each message is an envelope: one
// JSON object holding the headers and, after them, the payload as written
// (the outbox's payload is JSON):
//
//	{"headers":{"outbox-event-id":"...","outbox-event-type":"order.created",...},"payload":{"total":42}}
//
// The payload's bytes are kept exactly, so OpenEnvelope gives back what the
// event stored; any JSON reader can read the envelope too.
const (
	envelopeHead = `{"headers":`
	envelopeMid  = `,"payload":`
)

// Envelope returns the MQTT payload for msg: msg.StandardHeaders and
// msg.Payload in one JSON object. The payload must be valid JSON.
func Envelope(msg *outbox.Message) ([]byte, error) {
	if !json.Valid(msg.Payload) {
		return nil, errors.New("payload is not valid JSON; the MQTT envelope embeds it as JSON")
	}
	h, err := json.Marshal(msg.StandardHeaders())
	if err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	b := make([]byte, 0, len(envelopeHead)+len(h)+len(envelopeMid)+len(msg.Payload)+1)
	b = append(b, envelopeHead...)
	b = append(b, h...)
	b = append(b, envelopeMid...)
	b = append(b, msg.Payload...)
	return append(b, '}'), nil
}

// Payload returns the MQTT payload msg becomes, in msg.Envelope: the
// outbox envelope (Envelope), or, with either CloudEvents envelope, the
// JSON event format (structured content mode, the only one the MQTT
// binding defines for MQTT 3.1.1, which has no user properties).
func Payload(msg *outbox.Message) ([]byte, error) {
	if msg.Envelope.CloudEvents() {
		return msg.StructuredCloudEvent()
	}
	return Envelope(msg)
}

// OpenEnvelope returns the headers and the payload of an envelope Envelope
// made, the payload byte for byte. Another writer's envelope of the same
// shape (other spacing, other key order) is read too, its payload then as
// JSON with its outer white space trimmed.
func OpenEnvelope(b []byte) (headers map[string]string, payload []byte, err error) {
	if bytes.HasPrefix(b, []byte(envelopeHead)) {
		dec := json.NewDecoder(bytes.NewReader(b[len(envelopeHead):]))
		if dec.Decode(&headers) == nil {
			rest := b[len(envelopeHead)+int(dec.InputOffset()):]
			if bytes.HasPrefix(rest, []byte(envelopeMid)) && bytes.HasSuffix(rest, []byte("}")) {
				p := rest[len(envelopeMid) : len(rest)-1]
				if json.Valid(p) {
					return headers, p, nil
				}
			}
		}
	}
	var env struct {
		Headers map[string]string `json:"headers"`
		Payload json.RawMessage   `json:"payload"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, nil, fmt.Errorf("mqtt: not an outbox envelope: %w", err)
	}
	if env.Headers == nil || env.Payload == nil {
		return nil, nil, errors.New(`mqtt: not an outbox envelope: want a JSON object with "headers" and "payload"`)
	}
	return env.Headers, env.Payload, nil
}
