// Package awsfake is an in-process endpoint for three AWS services, speaking
// the protocols the current aws-sdk-go-v2 clients use, with the service
// rules the sns, eventbridge and kinesis publishers rely on. It is a test
// double written for this project, not an AWS product: the real SDK clients
// talk to it over HTTP on a loopback port, so request serialization,
// response parsing, retries and error decoding are exercised for real. The
// publishers' tests and the benchmark (bench/) run it.
//
// One Server answers all three, as LocalStack does, telling them apart by
// protocol:
//
//   - Amazon SNS (sns.go): the query protocol, a form-encoded POST with
//     Action=..., answered in XML. CreateTopic, GetTopicAttributes,
//     DeleteTopic, PublishBatch.
//   - Amazon EventBridge (eventbridge.go): AWS JSON 1.1, X-Amz-Target:
//     AWSEvents.<Operation>. CreateEventBus, DescribeEventBus,
//     DeleteEventBus, PutEvents.
//   - Amazon Kinesis Data Streams (kinesis.go): AWS JSON 1.1, X-Amz-Target:
//     Kinesis_20131202.<Operation>. CreateStream, DescribeStreamSummary,
//     DeleteStream, PutRecords.
//
// Each file lists the rules it enforces. None checks SigV4 signatures (only
// that a SigV4 Authorization header is present), none has latency, quotas
// or real throttling (SetFaults injects errors instead), and nothing is
// delivered anywhere: what a service accepted is read back with Messages,
// Events and Records.
//
//	f := awsfake.Start()
//	defer f.Close()
//	client := kinesis.New(kinesis.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), ...})
//
// One package rather than three: the three share the listener, the
// signature check, the error shapes and the fault injection, and a test or
// the benchmark needs one endpoint for all of them.
package awsfake

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// The account and region in the fake's ARNs.
const (
	Account = "000000000000"
	Region  = "us-east-1"
)

// Service names, as in Entry.Service and Call.Service.
const (
	SNS         = "sns"
	EventBridge = "events"
	Kinesis     = "kinesis"
)

// Entry is one entry of a batch call, as fault injection sees it.
type Entry struct {
	Service string // SNS, EventBridge or Kinesis
	Target  string // topic ARN, event bus name or stream name
	Body    string // SNS message, EventBridge detail, Kinesis data
	Key     string // SNS MessageGroupId, EventBridge detail-type, Kinesis partition key
}

// EntryFault makes the fake fail one entry of a batch. Kinesis and
// EventBridge ignore SenderFault (their results have none).
type EntryFault struct {
	Code        string
	Message     string
	SenderFault bool
}

// Call is one batch call (PublishBatch, PutEvents, PutRecords), or a
// DescribeEventBus, as fault injection sees it.
type Call struct {
	Service string
	Op      string   // PublishBatch, PutEvents, PutRecords, DescribeEventBus
	Target  string   // topic ARN, stream name or event bus name; "" for PutEvents
	Bodies  []string // the entries' bodies
}

// CallFault makes the fake answer a whole call with an error: the HTTP
// status and the error code (SNS Code, JSON __type).
type CallFault struct {
	Status int
	Code   string
}

// Faults are the errors a test injects; nil fields inject nothing.
type Faults struct {
	// Entry is asked about every entry of a batch call the call itself
	// did not fail: a non-nil EntryFault fails that entry.
	Entry func(Entry) *EntryFault
	// Call may fail a whole call before it is judged.
	Call func(Call) *CallFault
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	srv       *httptest.Server
	closeOnce sync.Once

	mu      sync.Mutex
	faults  Faults
	calls   map[string]int // "service.Operation" -> calls answered
	changed chan struct{}  // closed and replaced when something is stored

	topics  map[string]*topic  // by ARN
	buses   map[string]*bus    // by name
	streams map[string]*stream // by name
}

// Start starts a fake with the default event bus and nothing else,
// listening on a loopback port.
func Start() *Server {
	f := &Server{
		calls: map[string]int{}, changed: make(chan struct{}),
		topics: map[string]*topic{}, buses: map[string]*bus{"default": {name: "default"}}, streams: map[string]*stream{},
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// URL is the endpoint, "http://127.0.0.1:<port>": the SDKs' BaseEndpoint.
func (f *Server) URL() string { return f.srv.URL }

// Addr is the listener's address, "127.0.0.1:<port>".
func (f *Server) Addr() string { return f.srv.Listener.Addr().String() }

// Close stops the server: connections are refused from then on. It may be
// called more than once.
func (f *Server) Close() { f.closeOnce.Do(f.srv.Close) }

// SetFaults installs fault injection, replacing any before; Faults{}
// removes it.
func (f *Server) SetFaults(faults Faults) {
	f.mu.Lock()
	f.faults = faults
	f.mu.Unlock()
}

// Calls is how many calls of operation ("sns.PublishBatch",
// "events.PutEvents", "kinesis.PutRecords", ...) the fake has answered,
// failed ones included.
func (f *Server) Calls(operation string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[operation]
}

// Wait waits until cond, called under no lock, is true or ctx ends; it
// calls cond again each time the fake stores something.
func (f *Server) Wait(ctx context.Context, cond func() bool) error {
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stored wakes Wait; f.mu is held.
func (f *Server) stored() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// apiError is an error answer, in either protocol.
type apiError struct {
	status int
	code   string
	sender bool // SNS's Type: Sender or Receiver
	msg    string
}

func errSender(code, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, sender: true, msg: msg}
}

// callFault runs the Call fault hook; f.mu is held.
func (f *Server) callFault(c Call) *apiError {
	if f.faults.Call == nil {
		return nil
	}
	cf := f.faults.Call(c)
	if cf == nil || cf.Status == 0 {
		return nil
	}
	return &apiError{status: cf.Status, code: cf.Code, sender: cf.Status < 500, msg: "injected by SetFaults"}
}

// entryFault runs the Entry fault hook; f.mu is held.
func (f *Server) entryFault(e Entry) *EntryFault {
	if f.faults.Entry == nil {
		return nil
	}
	return f.faults.Entry(e)
}

// signingService returns the service of a SigV4 Authorization header
// ("AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request, ..."),
// or "" when the request is not signed.
func signingService(auth string) string {
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 Credential=")
	if !ok {
		return ""
	}
	scope, _, _ := strings.Cut(rest, ",")
	parts := strings.Split(scope, "/")
	if len(parts) != 5 || parts[4] != "aws4_request" {
		return ""
	}
	return parts[3]
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		writeJSONError(w, errSender("UnknownOperationException", r.Method+" "+r.URL.Path))
		return
	}
	service := signingService(r.Header.Get("Authorization"))
	target := r.Header.Get("X-Amz-Target")
	switch {
	case r.Header.Get("Content-Type") == "application/x-www-form-urlencoded":
		if service == "" {
			writeXMLError(w, &apiError{status: http.StatusForbidden, code: "MissingAuthenticationToken", sender: true, msg: "request is not signed"})
			return
		}
		f.serveSNS(w, r)
	case r.Header.Get("Content-Type") != "application/x-amz-json-1.1":
		writeJSONError(w, errSender("SerializationException", "content type "+r.Header.Get("Content-Type")))
	case service == "":
		writeJSONError(w, &apiError{status: http.StatusBadRequest, code: "MissingAuthenticationTokenException", sender: true, msg: "request is not signed"})
	case strings.HasPrefix(target, "AWSEvents."):
		f.serveJSON(w, r, EventBridge, strings.TrimPrefix(target, "AWSEvents."), f.eventBridgeOp)
	case strings.HasPrefix(target, "Kinesis_20131202."):
		f.serveJSON(w, r, Kinesis, strings.TrimPrefix(target, "Kinesis_20131202."), f.kinesisOp)
	default:
		writeJSONError(w, errSender("UnknownOperationException", "unknown operation "+target))
	}
}

// jsonOp runs one JSON operation: decode decodes the request body into v.
type jsonOp func(op string, decode func(v any) *apiError) (any, *apiError)

func (f *Server) serveJSON(w http.ResponseWriter, r *http.Request, service, op string, run jsonOp) {
	f.mu.Lock()
	f.calls[service+"."+op]++
	f.mu.Unlock()
	dec := json.NewDecoder(r.Body)
	out, aerr := run(op, func(v any) *apiError {
		if err := dec.Decode(v); err != nil {
			return errSender("SerializationException", "bad JSON: "+err.Error())
		}
		return nil
	})
	if aerr != nil {
		writeJSONError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", uuid.NewString())
	_ = json.NewEncoder(w).Encode(out)
}

func writeJSONError(w http.ResponseWriter, aerr *apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", uuid.NewString())
	w.WriteHeader(aerr.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": aerr.code, "message": aerr.msg})
}
