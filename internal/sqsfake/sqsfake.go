// Package sqsfake is an in-process SQS endpoint speaking the protocol the
// current aws-sdk-go-v2 client uses: AWS JSON 1.0 (POST /, X-Amz-Target:
// AmazonSQS.<Operation>, application/x-amz-json-1.0), with query-compatible
// errors (__type plus X-Amzn-Query-Error). The real SDK client talks to it
// over HTTP on a loopback port, so request serialization, response parsing,
// the SDK's MD5 body checks, retries and error decoding are exercised for
// real. The sqs package's tests and the benchmark (bench/) run it.
//
// It implements CreateQueue, GetQueueUrl, GetQueueAttributes,
// SendMessageBatch, ReceiveMessage (with long polling), DeleteMessageBatch
// and DeleteQueue, and the SQS rules the publisher depends on: at most 10
// entries with distinct ids per batch, the batch's total size, each
// message's size (body plus attribute names, types and values) against the
// queue's MaximumMessageSize, at most 10 attributes with non-empty values,
// the allowed body characters, MessageGroupId required on FIFO queues, and
// FIFO deduplication on MessageDeduplicationId. It does not check SigV4
// signatures (only that a SigV4 Authorization header is present), does not
// lock FIFO message groups while messages are in flight (a received message
// is hidden for its visibility timeout, as in a standard queue), and its
// ApproximateNumberOf* attributes are exact.
//
//	f := sqsfake.Start()
//	defer f.Close()
//	client := sqs.New(sqs.Options{Region: sqsfake.Region, BaseEndpoint: aws.String(f.URL()), ...})
package sqsfake

//lint:file-ignore ST1003 struct fields are named after the SQS JSON members they encode (encoding/json writes a field's name as it is)

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// The account and region in the fake's queue URLs and ARNs.
const (
	Account = "000000000000"
	Region  = "us-east-1"
)

const (
	apiBatchLimit  = 1 << 20 // SendMessageBatch's total, since SQS raised it to 1 MiB
	defaultMaxSize = 256 << 10
)

type fakeAttr struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue []byte `json:"BinaryValue,omitempty"`
}

type fakeMsg struct {
	id, receipt, body string
	attrs             map[string]fakeAttr
	group, dedup, seq string
	sent              time.Time
	invisibleUntil    time.Time // set by a receive: the visibility timeout
	receives          int
	deleted           bool
}

type fakeQueue struct {
	name    string
	fifo    bool
	maxSize int
	msgs    []*fakeMsg
	dedup   map[string]*fakeMsg // FIFO: MessageDeduplicationId -> first message
	seq     int64
}

// EntryFault makes the fake fail one entry of a batch (see SetFaults).
type EntryFault struct {
	Code        string
	Message     string
	SenderFault bool
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	srv       *httptest.Server
	closeOnce sync.Once

	mu      sync.Mutex
	queues  map[string]*fakeQueue
	arrived chan struct{} // closed and replaced when a message is stored
	closing chan struct{}
	// faultEntry, if set, is asked about every entry of SendMessageBatch.
	faultEntry func(body string) *EntryFault
	// faultCall, if set, may answer a whole SendMessageBatch call (given
	// its entries' bodies) with an HTTP status and error type instead.
	faultCall func(bodies []string) (status int, errType string)
	calls     int // SendMessageBatch calls
}

// Start starts a fake with no queues, listening on a loopback port.
func Start() *Server {
	f := &Server{queues: map[string]*fakeQueue{}, arrived: make(chan struct{}), closing: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// URL is the endpoint, "http://127.0.0.1:<port>": the SDK's BaseEndpoint.
func (f *Server) URL() string { return f.srv.URL }

// Addr is the listener's address, "127.0.0.1:<port>".
func (f *Server) Addr() string { return f.srv.Listener.Addr().String() }

// Close stops the server: connections are refused from then on, and long
// polls in progress return empty. It may be called more than once.
func (f *Server) Close() {
	f.closeOnce.Do(func() {
		close(f.closing) // ends long polls, so Close does not wait for them
		f.srv.Close()
	})
}

// SetFaults installs fault injection, replacing any before; nil removes it.
// entry, if set, is asked about every entry of SendMessageBatch: a non-nil
// EntryFault fails that entry. call, if set, may fail a whole
// SendMessageBatch call (given its entries' bodies) with an HTTP status and
// error type: a status of 0 lets the call through.
func (f *Server) SetFaults(entry func(body string) *EntryFault, call func(bodies []string) (status int, errType string)) {
	f.mu.Lock()
	f.faultEntry, f.faultCall = entry, call
	f.mu.Unlock()
}

// SendCalls is how many SendMessageBatch calls the fake has answered,
// failed ones included.
func (f *Server) SendCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Queues returns the names of the queues that exist, sorted.
func (f *Server) Queues() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.queues))
	for name := range f.queues {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

type apiError struct {
	status    int
	typ       string // the JSON error shape, e.g. QueueDoesNotExist
	queryCode string // the legacy query code, e.g. AWS.SimpleQueueService.NonExistentQueue
	sender    bool
	msg       string
}

func errSender(typ, msg string) *apiError {
	return &apiError{status: 400, typ: typ, queryCode: typ, sender: true, msg: msg}
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var out any
	var aerr *apiError
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/" || !ok:
		aerr = errSender("UnknownOperationException", "unknown operation "+r.Header.Get("X-Amz-Target"))
	case r.Header.Get("Content-Type") != "application/x-amz-json-1.0":
		aerr = errSender("InvalidParameterValue", "content type "+r.Header.Get("Content-Type"))
	case !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="):
		aerr = &apiError{status: 400, typ: "MissingAuthenticationTokenException", queryCode: "MissingAuthenticationToken", sender: true, msg: "request is not signed"}
	default:
		dec := json.NewDecoder(r.Body)
		decode := func(v any) bool {
			if err := dec.Decode(v); err != nil {
				aerr = errSender("InvalidParameterValue", "bad JSON: "+err.Error())
				return false
			}
			return true
		}
		switch op {
		case "CreateQueue":
			var in struct {
				QueueName  string
				Attributes map[string]string
			}
			if decode(&in) {
				out, aerr = f.createQueue(r, in.QueueName, in.Attributes)
			}
		case "GetQueueUrl":
			var in struct{ QueueName string }
			if decode(&in) {
				out, aerr = f.getQueueURL(r, in.QueueName)
			}
		case "GetQueueAttributes":
			var in struct{ QueueUrl string }
			if decode(&in) {
				out, aerr = f.getQueueAttributes(in.QueueUrl)
			}
		case "SendMessageBatch":
			var in sendBatchIn
			if decode(&in) {
				out, aerr = f.sendMessageBatch(in)
			}
		case "ReceiveMessage":
			var in receiveIn
			if decode(&in) {
				out, aerr = f.receiveMessage(r, in)
			}
		case "DeleteMessageBatch":
			var in struct {
				QueueUrl string
				Entries  []struct{ Id, ReceiptHandle string }
			}
			if decode(&in) {
				out, aerr = f.deleteMessageBatch(in.QueueUrl, in.Entries)
			}
		case "DeleteQueue":
			var in struct{ QueueUrl string }
			if decode(&in) {
				out, aerr = f.deleteQueue(in.QueueUrl)
			}
		default:
			aerr = errSender("UnsupportedOperation", op+" is not implemented by sqsfake")
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-RequestId", uuid.NewString())
	if aerr != nil {
		fault := "Receiver"
		if aerr.sender {
			fault = "Sender"
		}
		w.Header().Set("X-Amzn-Query-Error", aerr.queryCode+";"+fault)
		w.WriteHeader(aerr.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + aerr.typ, "message": aerr.msg})
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (f *Server) queueURL(r *http.Request, name string) string {
	return "http://" + r.Host + "/" + Account + "/" + name
}

// queue finds a queue by URL (by its path, as SQS routes by account and name).
func (f *Server) queue(queueURL string) (*fakeQueue, *apiError) {
	i := strings.Index(queueURL, "/"+Account+"/")
	if i >= 0 {
		if q, ok := f.queues[queueURL[i+len(Account)+2:]]; ok {
			return q, nil
		}
	}
	return nil, &apiError{status: 400, typ: "QueueDoesNotExist", queryCode: "AWS.SimpleQueueService.NonExistentQueue",
		sender: true, msg: "The specified queue does not exist."}
}

func (f *Server) createQueue(r *http.Request, name string, attrs map[string]string) (any, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fifo := attrs["FifoQueue"] == "true"
	if fifo != strings.HasSuffix(name, ".fifo") {
		return nil, errSender("InvalidParameterValue", "a FIFO queue's name must end in .fifo, and only a FIFO queue's")
	}
	maxSize := defaultMaxSize
	if s := attrs["MaximumMessageSize"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1024 || n > 1<<20 {
			return nil, errSender("InvalidAttributeValue", "MaximumMessageSize "+s)
		}
		maxSize = n
	}
	if _, ok := f.queues[name]; !ok {
		f.queues[name] = &fakeQueue{name: name, fifo: fifo, maxSize: maxSize, dedup: map[string]*fakeMsg{}}
	}
	return map[string]string{"QueueUrl": f.queueURL(r, name)}, nil
}

func (f *Server) getQueueURL(r *http.Request, name string) (any, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.queues[name]; !ok {
		_, aerr := f.queue("")
		return nil, aerr
	}
	return map[string]string{"QueueUrl": f.queueURL(r, name)}, nil
}

func (f *Server) getQueueAttributes(queueURL string) (any, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, aerr := f.queue(queueURL)
	if aerr != nil {
		return nil, aerr
	}
	visible, inFlight := 0, 0
	now := time.Now()
	for _, m := range q.msgs {
		switch {
		case m.deleted:
		case now.Before(m.invisibleUntil):
			inFlight++
		default:
			visible++
		}
	}
	return map[string]map[string]string{"Attributes": {
		"QueueArn":                              "arn:aws:sqs:" + Region + ":" + Account + ":" + q.name,
		"FifoQueue":                             strconv.FormatBool(q.fifo),
		"MaximumMessageSize":                    strconv.Itoa(q.maxSize),
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inFlight),
	}}, nil
}

// deleteQueue deletes a queue and its messages; receives waiting on it
// return QueueDoesNotExist.
func (f *Server) deleteQueue(queueURL string) (any, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, aerr := f.queue(queueURL)
	if aerr != nil {
		return nil, aerr
	}
	delete(f.queues, q.name)
	close(f.arrived) // wakes long polls, which then find the queue gone
	f.arrived = make(chan struct{})
	return struct{}{}, nil
}

type sendBatchIn struct {
	QueueUrl string
	Entries  []struct {
		Id                     string
		MessageBody            string
		MessageAttributes      map[string]fakeAttr
		MessageGroupId         string
		MessageDeduplicationId string
		DelaySeconds           int
	}
}

type batchFailure struct {
	Id          string
	SenderFault bool
	Code        string
	Message     string
}

// messageSize is SQS's measure: the body plus every attribute's name, data
// type and value.
func messageSize(body string, attrs map[string]fakeAttr) int {
	n := len(body)
	for k, a := range attrs {
		n += len(k) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	return n
}

// validChars is SQS's allowed set: #x9 | #xA | #xD | #x20-#xD7FF |
// #xE000-#xFFFD | #x10000-#x10FFFF.
func validChars(s string) bool {
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			return false
		case r == 0x9 || r == 0xA || r == 0xD, r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000:
		default:
			return false
		}
	}
	return true
}

func (f *Server) sendMessageBatch(in sendBatchIn) (any, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.faultCall != nil {
		bodies := make([]string, len(in.Entries))
		for i, e := range in.Entries {
			bodies[i] = e.MessageBody
		}
		if status, typ := f.faultCall(bodies); status != 0 {
			return nil, &apiError{status: status, typ: typ, queryCode: typ, sender: status < 500, msg: "injected by SetFaults"}
		}
	}
	q, aerr := f.queue(in.QueueUrl)
	if aerr != nil {
		return nil, aerr
	}
	switch {
	case len(in.Entries) == 0:
		return nil, errSender("EmptyBatchRequest", "no entries")
	case len(in.Entries) > 10:
		return nil, errSender("TooManyEntriesInBatchRequest", fmt.Sprintf("%d entries", len(in.Entries)))
	}
	ids := map[string]bool{}
	total := 0
	for _, e := range in.Entries {
		if ids[e.Id] {
			return nil, errSender("BatchEntryIdsNotDistinct", "id "+e.Id)
		}
		ids[e.Id] = true
		total += messageSize(e.MessageBody, e.MessageAttributes)
	}
	if total > apiBatchLimit {
		return nil, errSender("BatchRequestTooLong", fmt.Sprintf("%d bytes in the batch", total))
	}
	type success struct {
		Id, MessageId, MD5OfMessageBody string
		MD5OfMessageAttributes          string `json:",omitempty"`
		SequenceNumber                  string `json:",omitempty"`
	}
	var out struct {
		Successful []success
		Failed     []batchFailure
	}
	out.Successful, out.Failed = []success{}, []batchFailure{}
	stored := false
	for _, e := range in.Entries {
		fail := func(code, msg string, sender bool) {
			out.Failed = append(out.Failed, batchFailure{Id: e.Id, SenderFault: sender, Code: code, Message: msg})
		}
		if f.faultEntry != nil {
			if fe := f.faultEntry(e.MessageBody); fe != nil {
				fail(fe.Code, fe.Message, fe.SenderFault)
				continue
			}
		}
		if size := messageSize(e.MessageBody, e.MessageAttributes); size > q.maxSize {
			fail("InvalidParameterValue", fmt.Sprintf("message of %d bytes is longer than the queue's MaximumMessageSize %d", size, q.maxSize), true)
			continue
		}
		if e.MessageBody == "" || !validChars(e.MessageBody) {
			fail("InvalidMessageContents", "invalid characters in the message body", true)
			continue
		}
		if len(e.MessageAttributes) > 10 {
			fail("InvalidParameterValue", fmt.Sprintf("%d message attributes; at most 10", len(e.MessageAttributes)), true)
			continue
		}
		badAttr := ""
		for k, a := range e.MessageAttributes {
			if k == "" || len(k) > 256 || (a.DataType != "String" && a.DataType != "Number" && a.DataType != "Binary") ||
				(a.DataType != "Binary" && (a.StringValue == "" || !validChars(a.StringValue))) {
				badAttr = k
			}
		}
		if badAttr != "" {
			fail("InvalidParameterValue", "message attribute "+badAttr+" is invalid", true)
			continue
		}
		if q.fifo && e.MessageGroupId == "" {
			fail("MissingParameter", "The request must contain the parameter MessageGroupId.", true)
			continue
		}
		if q.fifo && e.MessageDeduplicationId == "" {
			fail("InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly", true)
			continue
		}
		s := success{Id: e.Id, MD5OfMessageBody: md5hex([]byte(e.MessageBody))}
		if len(e.MessageAttributes) > 0 {
			s.MD5OfMessageAttributes = attributesMD5(e.MessageAttributes)
		}
		if q.fifo {
			if first, dup := q.dedup[e.MessageDeduplicationId]; dup && time.Since(first.sent) < 5*time.Minute {
				// Accepted, not stored again: SQS's 5-minute dedup window.
				s.MessageId, s.SequenceNumber = first.id, first.seq
				out.Successful = append(out.Successful, s)
				continue
			}
			q.seq++
			s.SequenceNumber = fmt.Sprintf("%020d", q.seq)
		}
		m := &fakeMsg{id: uuid.NewString(), body: e.MessageBody, attrs: e.MessageAttributes,
			group: e.MessageGroupId, dedup: e.MessageDeduplicationId, seq: s.SequenceNumber, sent: time.Now()}
		if q.fifo {
			q.dedup[m.dedup] = m
		}
		q.msgs = append(q.msgs, m)
		stored = true
		s.MessageId = m.id
		out.Successful = append(out.Successful, s)
	}
	if stored {
		close(f.arrived)
		f.arrived = make(chan struct{})
	}
	return out, nil
}

type receiveIn struct {
	QueueUrl            string
	MaxNumberOfMessages int
	WaitTimeSeconds     int
	VisibilityTimeout   *int
}

func (f *Server) receiveMessage(r *http.Request, in receiveIn) (any, *apiError) {
	max := in.MaxNumberOfMessages
	if max == 0 {
		max = 1
	}
	if max < 1 || max > 10 {
		return nil, errSender("InvalidParameterValue", "MaxNumberOfMessages must be 1 to 10")
	}
	visibility := 30 * time.Second // the queue default
	if in.VisibilityTimeout != nil {
		visibility = time.Duration(*in.VisibilityTimeout) * time.Second
	}
	deadline := time.NewTimer(time.Duration(in.WaitTimeSeconds) * time.Second)
	defer deadline.Stop()
	type message struct {
		MessageId, ReceiptHandle, MD5OfBody, Body string
		Attributes                                map[string]string
		MessageAttributes                         map[string]fakeAttr `json:",omitempty"`
		MD5OfMessageAttributes                    string              `json:",omitempty"`
	}
	for {
		f.mu.Lock()
		q, aerr := f.queue(in.QueueUrl)
		if aerr != nil {
			f.mu.Unlock()
			return nil, aerr
		}
		var out []message
		now := time.Now()
		var nextVisible time.Time
		for _, m := range q.msgs {
			if len(out) == max {
				break
			}
			if m.deleted {
				continue
			}
			if now.Before(m.invisibleUntil) {
				if nextVisible.IsZero() || m.invisibleUntil.Before(nextVisible) {
					nextVisible = m.invisibleUntil
				}
				continue
			}
			m.invisibleUntil = now.Add(visibility)
			m.receives++
			m.receipt = uuid.NewString()
			attrs := map[string]string{"SentTimestamp": strconv.FormatInt(m.sent.UnixMilli(), 10), "ApproximateReceiveCount": strconv.Itoa(m.receives)}
			if q.fifo {
				attrs["MessageGroupId"], attrs["MessageDeduplicationId"], attrs["SequenceNumber"] = m.group, m.dedup, m.seq
			}
			msg := message{MessageId: m.id, ReceiptHandle: m.receipt, MD5OfBody: md5hex([]byte(m.body)), Body: m.body,
				Attributes: attrs, MessageAttributes: m.attrs}
			if len(m.attrs) > 0 {
				msg.MD5OfMessageAttributes = attributesMD5(m.attrs)
			}
			out = append(out, msg)
		}
		arrived := f.arrived
		f.mu.Unlock()
		if len(out) > 0 {
			return map[string][]message{"Messages": out}, nil
		}
		var visible <-chan time.Time
		if !nextVisible.IsZero() {
			tm := time.NewTimer(time.Until(nextVisible))
			defer tm.Stop()
			visible = tm.C
		}
		select {
		case <-visible:
		case <-arrived:
		case <-deadline.C:
			return map[string][]message{"Messages": {}}, nil
		case <-r.Context().Done():
			return map[string][]message{"Messages": {}}, nil
		case <-f.closing:
			return map[string][]message{"Messages": {}}, nil
		}
	}
}

func (f *Server) deleteMessageBatch(queueURL string, entries []struct{ Id, ReceiptHandle string }) (any, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, aerr := f.queue(queueURL)
	if aerr != nil {
		return nil, aerr
	}
	type ok struct{ Id string }
	out := struct {
		Successful []ok
		Failed     []batchFailure
	}{Successful: []ok{}, Failed: []batchFailure{}}
	for _, e := range entries {
		found := false
		for _, m := range q.msgs {
			if m.receipt == e.ReceiptHandle && m.receipt != "" {
				m.deleted, found = true, true
			}
		}
		if found {
			out.Successful = append(out.Successful, ok{e.Id})
		} else {
			out.Failed = append(out.Failed, batchFailure{Id: e.Id, SenderFault: true, Code: "ReceiptHandleIsInvalid", Message: "unknown receipt handle"})
		}
	}
	return out, nil
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// attributesMD5 is SQS's MD5OfMessageAttributes: over the attributes sorted
// by name, each as length-prefixed name, length-prefixed data type, a
// transport byte (1 string, 2 binary) and the length-prefixed value.
func attributesMD5(attrs map[string]fakeAttr) string {
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	h := md5.New()
	put := func(b []byte) {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(b)))
		h.Write(l[:])
		h.Write(b)
	}
	for _, k := range names {
		a := attrs[k]
		put([]byte(k))
		put([]byte(a.DataType))
		if strings.HasPrefix(a.DataType, "Binary") {
			h.Write([]byte{2})
			put(a.BinaryValue)
		} else {
			h.Write([]byte{1})
			put([]byte(a.StringValue))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
