package awsfake

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// SNS, as the query protocol speaks it, with the PublishBatch rules of the
// SNS API reference: at most 10 entries with distinct ids; each message's
// size (body plus attribute names, types and values) and the batch's total
// against the topic's MaximumMessageSize (256 KiB unless CreateTopic set
// it, up to 1 MiB); a non-empty UTF-8 body; at most 10 message attributes,
// each with a valid name, a known data type and a non-empty value;
// MessageGroupId on FIFO topics, and MessageDeduplicationId unless the
// topic has ContentBasedDeduplication; FIFO deduplication over 5 minutes;
// per-entry results with SenderFault; NotFound for a topic that does not
// exist. Messages are stored, not delivered: Messages reads them.

const (
	snsDefaultMaxSize = 256 << 10
	snsDedupWindow    = 5 * time.Minute
)

// MessageAttribute is an SNS message attribute as stored.
type MessageAttribute struct {
	DataType, StringValue string
}

// SNSMessage is a message an SNS topic accepted.
type SNSMessage struct {
	MessageID       string
	Message         string
	Attributes      map[string]MessageAttribute
	GroupID         string
	DeduplicationID string
	SequenceNumber  string // FIFO topics
}

type topic struct {
	arn, name    string
	fifo         bool
	contentDedup bool
	maxSize      int
	msgs         []SNSMessage
	dedup        map[string]dedupEntry
	seq          int64
}

type dedupEntry struct {
	at      time.Time
	id, seq string
}

// TopicARN is the ARN of the fake's topic name.
func TopicARN(name string) string { return "arn:aws:sns:" + Region + ":" + Account + ":" + name }

// Messages returns the messages topicARN accepted, in order; nil if the
// topic does not exist.
func (f *Server) Messages(topicARN string) []SNSMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.topics[topicARN]
	if !ok {
		return nil
	}
	return append([]SNSMessage(nil), t.msgs...)
}

// Topics returns the ARNs of the topics that exist, sorted.
func (f *Server) Topics() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.topics))
	for arn := range f.topics {
		out = append(out, arn)
	}
	sort.Strings(out)
	return out
}

func (f *Server) serveSNS(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeXMLError(w, errSender("MalformedQueryString", err.Error()))
		return
	}
	form := r.PostForm
	op := form.Get("Action")
	f.mu.Lock()
	f.calls[SNS+"."+op]++
	f.mu.Unlock()
	var (
		result string
		aerr   *apiError
	)
	switch op {
	case "CreateTopic":
		result, aerr = f.createTopic(form.Get("Name"), formMap(form, "Attributes"))
	case "GetTopicAttributes":
		result, aerr = f.getTopicAttributes(form.Get("TopicArn"))
	case "DeleteTopic":
		result, aerr = f.deleteTopic(form.Get("TopicArn"))
	case "PublishBatch":
		result, aerr = f.publishBatch(form.Get("TopicArn"), formEntries(form))
	default:
		aerr = &apiError{status: http.StatusBadRequest, code: "InvalidAction", sender: true, msg: op + " is not implemented by awsfake"}
	}
	if aerr != nil {
		writeXMLError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<%sResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><%sResult>%s</%sResult>`+
		`<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`, op, op, result, op, uuid.NewString(), op)
}

func writeXMLError(w http.ResponseWriter, aerr *apiError) {
	typ := "Receiver"
	if aerr.sender {
		typ = "Sender"
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(aerr.status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><Error><Type>%s</Type><Code>%s</Code>`+
		`<Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>`, typ, esc(aerr.code), esc(aerr.msg), uuid.NewString())
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// formMap reads a query-protocol map: NAME.entry.N.key / NAME.entry.N.value.
func formMap(form map[string][]string, name string) map[string]string {
	out := map[string]string{}
	for i := 1; ; i++ {
		p := fmt.Sprintf("%s.entry.%d.", name, i)
		k, ok := form[p+"key"]
		if !ok {
			return out
		}
		out[k[0]] = first(form[p+"value"])
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

type snsEntry struct {
	id, message, group, dedup string
	attrs                     map[string]MessageAttribute
	badAttr                   string // an attribute whose value is neither string nor binary
}

// formEntries reads PublishBatchRequestEntries.member.N.*.
func formEntries(form map[string][]string) []snsEntry {
	var out []snsEntry
	for i := 1; ; i++ {
		p := fmt.Sprintf("PublishBatchRequestEntries.member.%d.", i)
		id, ok := form[p+"Id"]
		if !ok {
			return out
		}
		e := snsEntry{id: id[0], message: first(form[p+"Message"]), group: first(form[p+"MessageGroupId"]),
			dedup: first(form[p+"MessageDeduplicationId"]), attrs: map[string]MessageAttribute{}}
		for j := 1; ; j++ {
			ap := fmt.Sprintf("%sMessageAttributes.entry.%d.", p, j)
			name, ok := form[ap+"Name"]
			if !ok {
				break
			}
			if _, bin := form[ap+"Value.BinaryValue"]; bin {
				e.badAttr = name[0] // the publisher sends none; the fake does not store them
			}
			e.attrs[name[0]] = MessageAttribute{DataType: first(form[ap+"Value.DataType"]), StringValue: first(form[ap+"Value.StringValue"])}
		}
		out = append(out, e)
	}
}

var topicName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

func (f *Server) createTopic(name string, attrs map[string]string) (string, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fifo := attrs["FifoTopic"] == "true"
	if fifo != strings.HasSuffix(name, ".fifo") || !topicName.MatchString(strings.TrimSuffix(name, ".fifo")) {
		return "", errSender("InvalidParameter", "Invalid parameter: Topic Name")
	}
	maxSize := snsDefaultMaxSize
	if s := attrs["MaximumMessageSize"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1024 || n > 1<<20 {
			return "", errSender("InvalidParameter", "Invalid parameter: MaximumMessageSize "+s)
		}
		maxSize = n
	}
	arn := TopicARN(name)
	if _, ok := f.topics[arn]; !ok {
		f.topics[arn] = &topic{arn: arn, name: name, fifo: fifo, contentDedup: attrs["ContentBasedDeduplication"] == "true",
			maxSize: maxSize, dedup: map[string]dedupEntry{}}
	}
	return "<TopicArn>" + esc(arn) + "</TopicArn>", nil
}

func errTopicNotFound() *apiError {
	return &apiError{status: http.StatusNotFound, code: "NotFound", sender: true, msg: "Topic does not exist"}
}

func (f *Server) getTopicAttributes(arn string) (string, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.topics[arn]
	if !ok {
		return "", errTopicNotFound()
	}
	var b strings.Builder
	b.WriteString("<Attributes>")
	for _, kv := range [][2]string{{"TopicArn", t.arn}, {"FifoTopic", strconv.FormatBool(t.fifo)}, {"MaximumMessageSize", strconv.Itoa(t.maxSize)}} {
		fmt.Fprintf(&b, "<entry><key>%s</key><value>%s</value></entry>", kv[0], esc(kv[1]))
	}
	b.WriteString("</Attributes>")
	return b.String(), nil
}

func (f *Server) deleteTopic(arn string) (string, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.topics, arn) // SNS's DeleteTopic of a missing topic succeeds
	return "", nil
}

var attrName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

// validAttr applies SNS's attribute rules: the name's characters and
// reserved prefixes, a known data type, a non-empty value.
func validAttr(name string, a MessageAttribute) bool {
	if !attrName.MatchString(name) || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") ||
		strings.Contains(name, "..") || strings.HasPrefix(strings.ToLower(name), "aws.") || strings.HasPrefix(strings.ToLower(name), "amazon.") {
		return false
	}
	base, _, _ := strings.Cut(a.DataType, ".")
	if base != "String" && base != "Number" {
		return false
	}
	return a.StringValue != "" && utf8.ValidString(a.StringValue)
}

// snsMessageSize is SNS's measure: the body plus every attribute's name,
// data type and value.
func snsMessageSize(e snsEntry) int {
	n := len(e.message)
	for k, a := range e.attrs {
		n += len(k) + len(a.DataType) + len(a.StringValue)
	}
	return n
}

func (f *Server) publishBatch(arn string, entries []snsEntry) (string, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	bodies := make([]string, len(entries))
	for i, e := range entries {
		bodies[i] = e.message
	}
	if aerr := f.callFault(Call{Service: SNS, Op: "PublishBatch", Target: arn, Bodies: bodies}); aerr != nil {
		return "", aerr
	}
	t, ok := f.topics[arn]
	if !ok {
		return "", errTopicNotFound()
	}
	switch {
	case len(entries) == 0:
		return "", errSender("EmptyBatchRequest", "The batch request doesn't contain any entries.")
	case len(entries) > 10:
		return "", errSender("TooManyEntriesInBatchRequest", fmt.Sprintf("%d entries; at most 10", len(entries)))
	}
	ids, total := map[string]bool{}, 0
	for _, e := range entries {
		if ids[e.id] {
			return "", errSender("BatchEntryIdsNotDistinct", "id "+e.id)
		}
		ids[e.id] = true
		total += snsMessageSize(e)
	}
	if total > t.maxSize {
		return "", errSender("BatchRequestTooLong", fmt.Sprintf("%d bytes in the batch; at most %d", total, t.maxSize))
	}
	var ok1, failed strings.Builder
	stored := false
	for _, e := range entries {
		fail := func(code, msg string, sender bool) {
			fmt.Fprintf(&failed, "<member><Id>%s</Id><Code>%s</Code><Message>%s</Message><SenderFault>%t</SenderFault></member>",
				esc(e.id), esc(code), esc(msg), sender)
		}
		if fe := f.entryFault(Entry{Service: SNS, Target: arn, Body: e.message, Key: e.group}); fe != nil {
			fail(fe.Code, fe.Message, fe.SenderFault)
			continue
		}
		if size := snsMessageSize(e); size > t.maxSize {
			fail("InvalidParameter", fmt.Sprintf("Invalid parameter: Message too long (%d bytes; at most %d)", size, t.maxSize), true)
			continue
		}
		if e.message == "" || !utf8.ValidString(e.message) {
			fail("InvalidParameter", "Invalid parameter: Empty message or not UTF-8", true)
			continue
		}
		if len(e.attrs) > 10 {
			fail("InvalidParameterValue", fmt.Sprintf("%d message attributes; at most 10", len(e.attrs)), true)
			continue
		}
		bad := e.badAttr
		for k, a := range e.attrs {
			if !validAttr(k, a) {
				bad = k
			}
		}
		if bad != "" {
			fail("InvalidParameterValue", "The message attribute '"+bad+"' is invalid", true)
			continue
		}
		if t.fifo && e.group == "" {
			fail("InvalidParameter", "Invalid parameter: The MessageGroupId parameter is required for FIFO topics", true)
			continue
		}
		dedup := e.dedup
		if t.fifo && dedup == "" {
			if !t.contentDedup {
				fail("InvalidParameter", "Invalid parameter: The topic should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly", true)
				continue
			}
			dedup = e.message
		}
		var seq string
		if t.fifo {
			if d, dup := t.dedup[dedup]; dup && time.Since(d.at) < snsDedupWindow {
				// Accepted, not stored again.
				fmt.Fprintf(&ok1, "<member><Id>%s</Id><MessageId>%s</MessageId><SequenceNumber>%s</SequenceNumber></member>", esc(e.id), d.id, d.seq)
				continue
			}
			t.seq++
			seq = fmt.Sprintf("%020d", t.seq)
		}
		m := SNSMessage{MessageID: uuid.NewString(), Message: e.message, Attributes: e.attrs, GroupID: e.group, DeduplicationID: e.dedup, SequenceNumber: seq}
		if t.fifo {
			t.dedup[dedup] = dedupEntry{at: time.Now(), id: m.MessageID, seq: seq}
		}
		t.msgs = append(t.msgs, m)
		stored = true
		fmt.Fprintf(&ok1, "<member><Id>%s</Id><MessageId>%s</MessageId>", esc(e.id), m.MessageID)
		if seq != "" {
			fmt.Fprintf(&ok1, "<SequenceNumber>%s</SequenceNumber>", seq)
		}
		ok1.WriteString("</member>")
	}
	if stored {
		f.stored()
	}
	return "<Successful>" + ok1.String() + "</Successful><Failed>" + failed.String() + "</Failed>", nil
}
