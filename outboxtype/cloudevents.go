package outboxtype

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Envelope is how the relay frames each event on the wire
// (RelayConfig.Envelope, Message.Envelope). Every publisher of this module
// maps it onto its broker; docs/CLOUDEVENTS.md has the table.
type Envelope string

const (
	// EnvelopeOutbox is the outbox's own format: the payload as the body,
	// Message.StandardHeaders as the headers. The zero value means it too.
	EnvelopeOutbox Envelope = "outbox"
	// EnvelopeCloudEvents sends each event as a CloudEvent 1.0 in binary
	// content mode: the payload as the body, the context attributes in the
	// broker's headers under its protocol binding's names (Kafka ce_,
	// HTTP, NATS and Pub/Sub ce-, AMQP cloudEvents_). A broker with no
	// headers (MQTT 3.1.1, Kinesis, EventBridge) gets structured mode.
	EnvelopeCloudEvents Envelope = "cloudevents"
	// EnvelopeCloudEventsStructured sends each event as a CloudEvent 1.0 in
	// structured content mode: the JSON event format
	// (application/cloudevents+json) as the body, the payload as its data.
	EnvelopeCloudEventsStructured Envelope = "cloudevents-structured"
)

// CloudEvents reports whether e is one of the CloudEvents envelopes.
func (e Envelope) CloudEvents() bool {
	return e == EnvelopeCloudEvents || e == EnvelopeCloudEventsStructured
}

// Valid returns an error naming e unless it is an Envelope of this
// package (the empty string, EnvelopeOutbox's zero value, included).
func (e Envelope) Valid() error {
	switch e {
	case "", EnvelopeOutbox, EnvelopeCloudEvents, EnvelopeCloudEventsStructured:
		return nil
	}
	return fmt.Errorf("%q: want %q, %q or %q", string(e), EnvelopeOutbox, EnvelopeCloudEvents, EnvelopeCloudEventsStructured)
}

// CloudEvents constants every binding uses.
const (
	// CloudEventsSpecVersion is the specversion of every event sent.
	CloudEventsSpecVersion = "1.0"
	// CloudEventsJSON is the media type of structured mode's body (the
	// JSON event format); bindings send it as the message's content type.
	CloudEventsJSON = "application/cloudevents+json"
	// CloudEventsDataContentType is the datacontenttype of every event:
	// outbox payloads are JSON.
	CloudEventsDataContentType = "application/json"
	// DefaultCloudEventsSource is the source of an event whose
	// Message.CloudEventsSource is empty (a publisher used without a
	// relay); a relay's default names its table (see
	// CloudEventsSourceFor).
	DefaultCloudEventsSource = "/pgoutbox"
)

// CloudEventsHeaderPrefix prefixes the attributes' header names in binary
// content mode in the HTTP, NATS and Pub/Sub bindings (ce-id, ce-type...),
// and in this module's Redis, SQS and SNS mappings.
const CloudEventsHeaderPrefix = "ce-"

// Extension attributes carrying outbox metadata that has no CloudEvents
// context attribute of its own.
const (
	// CloudEventsAggregateType carries Message.AggregateType
	// (HeaderAggregateType).
	CloudEventsAggregateType = "outboxaggregatetype"
)

// CloudEventsSourceFor returns a relay's default source attribute for the
// outbox table schema.table: /pgoutbox/<schema>.<table>, or
// /pgoutbox/<table> when schema is empty (the connection's search_path),
// escaped as a URI path segment.
func CloudEventsSourceFor(schema, table string) string {
	name := table
	if schema != "" {
		name = schema + "." + table
	}
	return DefaultCloudEventsSource + "/" + url.PathEscape(name)
}

// ValidCloudEventsSource returns an error unless s can be a source
// attribute: a non-empty URI reference, in printable ASCII.
func ValidCloudEventsSource(s string) error {
	if s == "" {
		return errors.New("a source is a non-empty URI reference")
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return fmt.Errorf("%q: a URI reference has no white space, control or non-ASCII characters (percent-encode them)", s)
		}
	}
	if _, err := url.Parse(s); err != nil {
		return fmt.Errorf("%q is not a URI reference: %w", s, err)
	}
	return nil
}

// CloudEvent is an event in CloudEvents 1.0 terms: its context attributes
// and its data. Message.CloudEvent builds one to send; ReadCloudEvent reads
// one a consumer received.
type CloudEvent struct {
	ID              string    // id: the event id, the consumer's dedup key
	Source          string    // source
	Type            string    // type: the event type
	Subject         string    // subject: the aggregate id; "" when none
	Time            time.Time // time: created_at; zero when none
	DataContentType string    // datacontenttype: application/json
	// Extensions are the extension attributes by name, in their canonical
	// string form: outboxaggregatetype and the message's headers that have
	// a CloudEvents name (CloudEventsAttributeName).
	Extensions map[string]string
	// Data is the event data: the payload, byte for byte.
	Data []byte
}

// Attribute is one context attribute in its canonical string form.
type Attribute struct {
	Name, Value string
}

// coreAttributes are the names CloudEvents 1.0 reserves: context
// attributes, and the JSON format's data members.
var coreAttributes = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true, "datacontenttype": true,
	"dataschema": true, "subject": true, "time": true, "data": true, "database64": true,
}

// CloudEventsAttributeName returns the extension attribute a message header
// travels under in a CloudEvent: its name in lower case without the
// characters CloudEvents refuses (anything but a-z and 0-9), so tenant
// stays tenant and X-Request-ID becomes xrequestid. ok is false (the
// header is left out) when nothing is left, when more than 20 characters
// are left (the specification's limit for portable names), or when the
// name is a context attribute of CloudEvents itself (id, type...).
func CloudEventsAttributeName(header string) (name string, ok bool) {
	b := make([]byte, 0, len(header))
	for i := 0; i < len(header); i++ {
		c := header[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		}
	}
	name = string(b)
	if name == "" || len(name) > 20 || coreAttributes[name] {
		return "", false
	}
	return name, true
}

// CloudEvent returns m as a CloudEvent: id = ID, source =
// CloudEventsSource (DefaultCloudEventsSource if empty), type = EventType,
// subject = AggregateID, time = CreatedAt, datacontenttype =
// application/json, data = Payload; the aggregate type as the
// outboxaggregatetype extension and each header as the extension
// CloudEventsAttributeName gives it. Headers left out: those with no
// CloudEvents name, an empty value or a value CloudEvents cannot carry
// (control characters, invalid UTF-8); of two headers with the same
// CloudEvents name, the one already spelled so, else the first in byte
// order. The standard headers (HeaderEventID...) are the context
// attributes themselves. An error means the event cannot be a CloudEvent
// (an empty type, a type or subject CloudEvents cannot carry); sending it
// again cannot help.
func (m *Message) CloudEvent() (*CloudEvent, error) {
	e := &CloudEvent{
		ID: m.ID.String(), Source: m.CloudEventsSource, Type: m.EventType, Subject: m.AggregateID,
		Time: m.CreatedAt.UTC(), DataContentType: CloudEventsDataContentType, Data: m.Payload,
	}
	e.Source = cmp.Or(e.Source, DefaultCloudEventsSource)
	if err := ValidCloudEventsSource(e.Source); err != nil {
		return nil, fmt.Errorf("cloudevents: source: %w", err)
	}
	if e.Type == "" {
		return nil, errors.New("cloudevents: the event type is empty; the type attribute is required")
	}
	if !validString(e.Type) {
		return nil, fmt.Errorf("cloudevents: event type %.64q: a CloudEvents string has no control characters and is valid UTF-8", e.Type)
	}
	if !validString(e.Subject) {
		return nil, fmt.Errorf("cloudevents: aggregate id %.64q as subject: a CloudEvents string has no control characters and is valid UTF-8", e.Subject)
	}
	e.Extensions = make(map[string]string, len(m.Headers)+1)
	if m.AggregateType != "" && validString(m.AggregateType) {
		e.Extensions[CloudEventsAggregateType] = m.AggregateType
	}
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		switch k {
		case HeaderEventID, HeaderEventType, HeaderAggregateType, HeaderAggregateID, HeaderCreatedAt:
			continue // the row's own never override the standard ones
		}
		names = append(names, k)
	}
	slices.Sort(names)
	// Headers already spelled as their attribute first, so "tenant" keeps
	// its value when "Tenant" is there too.
	for _, exact := range []bool{true, false} {
		for _, k := range names {
			name, ok := CloudEventsAttributeName(k)
			if !ok || (name == k) != exact {
				continue
			}
			if _, taken := e.Extensions[name]; taken {
				continue
			}
			if v := m.Headers[k]; v != "" && validString(v) {
				e.Extensions[name] = v
			}
		}
	}
	return e, nil
}

// StructuredCloudEvent returns m as structured content mode's body: the
// JSON event format of m.CloudEvent (see CloudEvent.Structured).
func (m *Message) StructuredCloudEvent() ([]byte, error) {
	e, err := m.CloudEvent()
	if err != nil {
		return nil, err
	}
	return e.Structured()
}

// validString reports whether s is a CloudEvents String: valid UTF-8
// without control characters (U+0000-U+001F, U+007F-U+009F) or
// noncharacters.
func validString(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r < 0x20, r >= 0x7f && r <= 0x9f:
			return false
		case r >= 0xfdd0 && r <= 0xfdef, r&0xfffe == 0xfffe:
			return false
		}
	}
	return true
}

// Attributes returns e's context attributes for binary content mode, in
// their canonical string form and a fixed order: specversion, id, source,
// type, subject (when set), time (when set), then the extensions by name.
// datacontenttype is not among them: most bindings carry it as the
// message's own content type (see each broker's doc).
func (e *CloudEvent) Attributes() []Attribute {
	a := make([]Attribute, 0, 6+len(e.Extensions))
	a = append(a, Attribute{"specversion", CloudEventsSpecVersion}, Attribute{"id", e.ID},
		Attribute{"source", e.Source}, Attribute{"type", e.Type})
	if e.Subject != "" {
		a = append(a, Attribute{"subject", e.Subject})
	}
	if !e.Time.IsZero() {
		a = append(a, Attribute{"time", e.Time.UTC().Format(time.RFC3339Nano)})
	}
	ext := make([]string, 0, len(e.Extensions))
	for k := range e.Extensions {
		ext = append(ext, k)
	}
	slices.Sort(ext)
	for _, k := range ext {
		a = append(a, Attribute{k, e.Extensions[k]})
	}
	return a
}

// Structured returns e in the JSON event format, structured content
// mode's body: one object with the context attributes (as Attributes,
// plus datacontenttype) and, last, "data" holding Data byte for byte.
// Data must be valid JSON.
func (e *CloudEvent) Structured() ([]byte, error) {
	if !json.Valid(e.Data) {
		return nil, errors.New("cloudevents: the payload is not valid JSON; the JSON event format embeds it as JSON")
	}
	attrs := e.Attributes()
	if e.DataContentType != "" {
		attrs = append(attrs, Attribute{"datacontenttype", e.DataContentType})
	}
	b := make([]byte, 0, 256+len(e.Data))
	b = append(b, '{')
	for _, a := range attrs {
		b = appendJSONString(b, a.Name)
		b = append(b, ':')
		b = appendJSONString(b, a.Value)
		b = append(b, ',')
	}
	b = append(b, `"data":`...)
	b = append(b, e.Data...)
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string, without the HTML escaping
// encoding/json does by default (a type like a<b stays readable).
func appendJSONString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// EncodeHeaderValue percent-encodes v as the HTTP and NATS bindings want
// a header value: space, '"', '%' and every byte outside printable ASCII
// become %XX. The values outbox events usually carry (UUIDs, event types,
// RFC 3339 times) are unchanged.
func EncodeHeaderValue(v string) string {
	n := 0
	for i := 0; i < len(v); i++ {
		if mustEscape(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(v)+2*n)
	for i := 0; i < len(v); i++ {
		if c := v[i]; mustEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func mustEscape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// DecodeHeaderValue undoes EncodeHeaderValue (and any other
// percent-encoding): it fails on a malformed escape or on bytes that are
// not UTF-8 once decoded. A value in double quotes is unquoted first, as
// the bindings ask of receivers.
func DecodeHeaderValue(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		for i := 1; i < len(v)-1; i++ {
			if v[i] == '\\' && i+1 < len(v)-1 {
				i++
			}
			b.WriteByte(v[i])
		}
		v = b.String()
	}
	if !strings.Contains(v, "%") {
		return v, nil
	}
	s, err := url.PathUnescape(v)
	if err != nil {
		return "", fmt.Errorf("%.64q: %w", v, err)
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%.64q: not UTF-8 once percent-decoded", v)
	}
	return s, nil
}

// Binary content mode header prefixes ReadCloudEvent knows, in lower case:
// HTTP, NATS and Pub/Sub (and this module's Redis, SQS and SNS mappings)
// use ce-, Kafka ce_, AMQP cloudEvents_ or, in older senders, cloudEvents:.
// Only ce- values are percent-encoded.
var binaryPrefixes = []string{"ce-", "ce_", "cloudevents_", "cloudevents:"}

// ReadCloudEvent reads the CloudEvent in a message a consumer received, as
// headers (names matched case-insensitively) and a body. It returns nil
// and no error when the message is no CloudEvent:
//
//   - binary content mode: a specversion attribute under a known header
//     prefix (ce-, ce_, cloudEvents_, cloudEvents:); every header under
//     that prefix is an attribute (ce- values percent-decoded),
//     datacontenttype may be the content-type header, data is the body;
//   - structured content mode: a content-type header of
//     application/cloudevents+json, or, in a message without a
//     HeaderEventID header or another content type, a body that is a JSON
//     object with a specversion member (MQTT 3.1.1, Kinesis and
//     EventBridge carry no headers).
//
// An error means a CloudEvent that breaks the specification: a specversion
// other than 1.0, a missing id, source or type, a time that is not RFC
// 3339, a malformed body.
func ReadCloudEvent(headers map[string]string, body []byte) (*CloudEvent, error) {
	var contentType string
	outboxID := false
	for k, v := range headers {
		switch {
		case strings.EqualFold(k, "content-type"):
			contentType = v
		case strings.EqualFold(k, HeaderEventID):
			outboxID = true
		}
	}
	for _, prefix := range binaryPrefixes {
		for k := range headers {
			if len(k) == len(prefix)+len("specversion") && strings.EqualFold(k, prefix+"specversion") {
				return readBinary(headers, prefix, contentType, body)
			}
		}
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == CloudEventsJSON:
		return readStructured(body)
	case !outboxID && (contentType == "" || mt == "application/json"):
		// Headerless brokers: sniff for the JSON event format (an outbox
		// message's payload may be a JSON object with a specversion too).
		t := bytes.TrimSpace(body)
		if len(t) > 0 && t[0] == '{' && bytes.Contains(t, []byte(`"specversion"`)) {
			var probe struct {
				SpecVersion *json.RawMessage `json:"specversion"`
			}
			if json.Unmarshal(t, &probe) == nil && probe.SpecVersion != nil {
				return readStructured(body)
			}
		}
	}
	return nil, nil
}

func readBinary(headers map[string]string, prefix, contentType string, body []byte) (*CloudEvent, error) {
	attrs := map[string]string{}
	for k, v := range headers {
		if len(k) <= len(prefix) || !strings.EqualFold(k[:len(prefix)], prefix) {
			continue
		}
		name := strings.ToLower(k[len(prefix):])
		if prefix == "ce-" {
			d, err := DecodeHeaderValue(v)
			if err != nil {
				return nil, fmt.Errorf("cloudevents: header %s: %w", k, err)
			}
			v = d
		}
		attrs[name] = v
	}
	if _, ok := attrs["datacontenttype"]; !ok && contentType != "" {
		attrs["datacontenttype"] = contentType
	}
	return fromAttributes(attrs, body)
}

func readStructured(body []byte) (*CloudEvent, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return nil, fmt.Errorf("cloudevents: structured mode: the body is not a JSON object: %w", err)
	}
	attrs := make(map[string]string, len(members))
	var data []byte
	for k, raw := range members {
		switch k {
		case "data":
			if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
				data = verbatimData(body, raw)
			}
			continue
		case "data_base64":
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("cloudevents: data_base64 is not a string: %w", err)
			}
			d, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, fmt.Errorf("cloudevents: data_base64: %w", err)
			}
			data = d
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			attrs[k] = s
			continue
		}
		// Integer and Boolean extensions have a JSON form of their own.
		t := bytes.TrimSpace(raw)
		if len(t) > 0 && (t[0] == '-' || (t[0] >= '0' && t[0] <= '9') || string(t) == "true" || string(t) == "false") {
			attrs[k] = string(t)
			continue
		}
		if string(t) == "null" {
			continue // an absent attribute, as the format allows
		}
		return nil, fmt.Errorf("cloudevents: attribute %.64q is not a string, integer or boolean", k)
	}
	return fromAttributes(attrs, data)
}

// verbatimData returns the data member's bytes as written when body ends
// with it, as Structured writes it (json.Unmarshal gives raw without its
// outer white space), so a payload comes back byte for byte.
func verbatimData(body, raw []byte) []byte {
	t := bytes.TrimRightFunc(body, func(r rune) bool { return r == ' ' || r == '\n' || r == '\r' || r == '\t' })
	i := bytes.LastIndex(t, []byte(`"data":`))
	if i < 0 || len(t) == 0 || t[len(t)-1] != '}' {
		return raw
	}
	d := t[i+len(`"data":`) : len(t)-1]
	if bytes.Equal(bytes.TrimSpace(d), raw) {
		return d
	}
	return raw
}

// fromAttributes checks the attributes a message carried and builds its
// CloudEvent.
func fromAttributes(attrs map[string]string, data []byte) (*CloudEvent, error) {
	if v := attrs["specversion"]; v != CloudEventsSpecVersion {
		return nil, fmt.Errorf("cloudevents: specversion %.16q: only %s is read", v, CloudEventsSpecVersion)
	}
	e := &CloudEvent{
		ID: attrs["id"], Source: attrs["source"], Type: attrs["type"], Subject: attrs["subject"],
		DataContentType: attrs["datacontenttype"], Data: data, Extensions: map[string]string{},
	}
	for _, req := range []struct{ name, v string }{{"id", e.ID}, {"source", e.Source}, {"type", e.Type}} {
		if req.v == "" {
			return nil, fmt.Errorf("cloudevents: the required attribute %s is missing or empty", req.name)
		}
	}
	if s := attrs["time"]; s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Errorf("cloudevents: time %.64q is not an RFC 3339 timestamp", s)
		}
		e.Time = t
	}
	for k, v := range attrs {
		if !coreAttributes[k] {
			e.Extensions[k] = v
		}
	}
	return e, nil
}
