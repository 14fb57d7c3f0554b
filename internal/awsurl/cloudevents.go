package awsurl

import (
	"slices"

	"github.com/pgoutbox/outbox/outboxtype"
)

// MaxAttributes is how many message attributes SQS (and SNS delivering to
// SQS) carries per message.
const MaxAttributes = 10

// CloudEventsPrefix prefixes the CloudEvents attributes' message attribute
// names in binary content mode (ce-id, ce-type...). CloudEvents has no SQS
// or SNS binding; the names and values follow the HTTP and NATS bindings'
// rules (values percent-encoded), so one reader serves them all.
const CloudEventsPrefix = "ce-"

// AttrContentType is the message attribute naming structured mode's media
// type (application/cloudevents+json).
const AttrContentType = "content-type"

// CloudEventsAttributes returns the message attributes of e in binary
// content mode, at most MaxAttributes: the context attributes first
// (specversion, id, source, type, subject, time, datacontenttype), then the
// extensions while there is room: outboxaggregatetype, traceparent and
// tracestate first, then the others by name. dropped is how many
// extensions did not fit.
func CloudEventsAttributes(e *outboxtype.CloudEvent) (attrs []outboxtype.Attribute, dropped int) {
	var ext []outboxtype.Attribute
	for _, a := range e.Attributes() {
		if _, isExt := e.Extensions[a.Name]; isExt {
			ext = append(ext, a)
			continue
		}
		attrs = append(attrs, outboxtype.Attribute{Name: CloudEventsPrefix + a.Name, Value: outboxtype.EncodeHeaderValue(a.Value)})
	}
	attrs = append(attrs, outboxtype.Attribute{Name: CloudEventsPrefix + "datacontenttype", Value: e.DataContentType})
	rank := func(name string) int {
		switch name {
		case outboxtype.CloudEventsAggregateType:
			return 0
		case "traceparent":
			return 1
		case "tracestate":
			return 2
		}
		return 3
	}
	slices.SortStableFunc(ext, func(a, b outboxtype.Attribute) int { return rank(a.Name) - rank(b.Name) })
	for i, a := range ext {
		if len(attrs) == MaxAttributes {
			return attrs, len(ext) - i
		}
		attrs = append(attrs, outboxtype.Attribute{Name: CloudEventsPrefix + a.Name, Value: outboxtype.EncodeHeaderValue(a.Value)})
	}
	return attrs, 0
}
