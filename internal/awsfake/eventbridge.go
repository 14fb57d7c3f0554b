package awsfake

//lint:file-ignore ST1003 struct fields are named after the EventBridge JSON members they encode (encoding/json writes a field's name as it is)

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// EventBridge, as AWS JSON 1.1 speaks it, with the PutEvents rules of the
// EventBridge API reference: at most 10 entries; the entries' total size,
// counted as the user guide's "Calculating PutEvents event entry size"
// counts it (14 bytes for Time, the UTF-8 bytes of Source, DetailType,
// Detail and each resource), at most 256 KiB; Source (at most 256
// characters) and DetailType (at most 128) within their lengths, else the
// whole call fails with ValidationException; per entry, Source, DetailType
// and Detail present (else InvalidArgument), Detail a JSON object (else
// MalformedDetail), no "aws." source (NotAuthorizedForSourceException);
// results in request order. As the real service does (AWS SDK users
// report it), PutEvents to an event bus that does not exist succeeds and
// the event is dropped: only DescribeEventBus tells. The default bus
// always exists. Events are stored, not matched to rules: Events reads
// them.

const (
	ebMaxEntries      = 10
	ebMaxRequestBytes = 256 << 10
)

// Event is an event an event bus accepted.
type Event struct {
	ID         string
	Bus        string
	Source     string
	DetailType string
	Detail     string
	Time       time.Time // zero if the entry had none
	Resources  []string
}

type bus struct {
	name   string
	events []Event
}

// EventBusARN is the ARN of the fake's event bus name.
func EventBusARN(name string) string {
	return "arn:aws:events:" + Region + ":" + Account + ":event-bus/" + name
}

// Events returns the events bus (a name) accepted, in order; nil if the bus
// does not exist.
func (f *Server) Events(bus string) []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.buses[bus]
	if !ok {
		return nil
	}
	return append([]Event(nil), b.events...)
}

// Buses returns the names of the event buses that exist, the default one
// included, sorted.
func (f *Server) Buses() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.buses))
	for name := range f.buses {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// busName resolves a bus name or ARN to a name.
func busName(s string) string {
	if s == "" {
		return "default"
	}
	if i := strings.LastIndex(s, ":event-bus/"); strings.HasPrefix(s, "arn:") && i >= 0 {
		return s[i+len(":event-bus/"):]
	}
	return s
}

func errBusNotFound(name string) *apiError {
	return errSender("ResourceNotFoundException", "Event bus "+name+" does not exist.")
}

var busNamePattern = regexp.MustCompile(`^[/.\-_A-Za-z0-9]{1,256}$`)

func (f *Server) eventBridgeOp(op string, decode func(any) *apiError) (any, *apiError) {
	var in struct {
		Name    string
		Entries []ebEntry
	}
	if aerr := decode(&in); aerr != nil {
		return nil, aerr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch op {
	case "CreateEventBus":
		if !busNamePattern.MatchString(in.Name) || in.Name == "default" {
			return nil, errSender("ValidationException", "invalid event bus name "+in.Name)
		}
		if _, ok := f.buses[in.Name]; ok {
			return nil, errSender("ResourceAlreadyExistsException", "Event bus "+in.Name+" already exists.")
		}
		f.buses[in.Name] = &bus{name: in.Name}
		return map[string]string{"EventBusArn": EventBusARN(in.Name)}, nil
	case "DescribeEventBus":
		name := busName(in.Name)
		if aerr := f.callFault(Call{Service: EventBridge, Op: op, Target: name}); aerr != nil {
			return nil, aerr
		}
		if _, ok := f.buses[name]; !ok {
			return nil, errBusNotFound(name)
		}
		return map[string]string{"Name": name, "Arn": EventBusARN(name)}, nil
	case "DeleteEventBus":
		if in.Name == "default" {
			return nil, errSender("ValidationException", "the default event bus cannot be deleted")
		}
		delete(f.buses, in.Name)
		return struct{}{}, nil
	case "PutEvents":
		return f.putEvents(in.Entries)
	}
	return nil, errSender("UnknownOperationException", op+" is not implemented by awsfake")
}

type ebEntry struct {
	Source, DetailType, Detail, EventBusName, TraceHeader string
	Resources                                             []string
	Time                                                  *float64
}

// ebEntrySize is the user guide's measure of an entry.
func ebEntrySize(e ebEntry) int {
	n := len(e.Source) + len(e.DetailType) + len(e.Detail)
	if e.Time != nil {
		n += 14
	}
	for _, r := range e.Resources {
		n += len(r)
	}
	return n
}

func (f *Server) putEvents(entries []ebEntry) (any, *apiError) {
	bodies := make([]string, len(entries))
	for i, e := range entries {
		bodies[i] = e.Detail
	}
	if aerr := f.callFault(Call{Service: EventBridge, Op: "PutEvents", Bodies: bodies}); aerr != nil {
		return nil, aerr
	}
	if len(entries) == 0 || len(entries) > ebMaxEntries {
		return nil, errSender("ValidationException", fmt.Sprintf("1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length between 1 and %d (%d entries)", ebMaxEntries, len(entries)))
	}
	total := 0
	for _, e := range entries {
		total += ebEntrySize(e)
		if utf8.RuneCountInString(e.Source) > 256 || utf8.RuneCountInString(e.DetailType) > 128 {
			return nil, errSender("ValidationException", "1 validation error detected: Source or DetailType too long")
		}
	}
	if total > ebMaxRequestBytes {
		return nil, errSender("ValidationException", fmt.Sprintf("Total size of the entries in the request is over the limit (%d bytes; at most %d).", total, ebMaxRequestBytes))
	}
	type result struct {
		EventId      string `json:",omitempty"`
		ErrorCode    string `json:",omitempty"`
		ErrorMessage string `json:",omitempty"`
	}
	out := struct {
		FailedEntryCount int
		Entries          []result
	}{Entries: []result{}}
	stored := false
	for _, e := range entries {
		fail := func(code, msg string) {
			out.FailedEntryCount++
			out.Entries = append(out.Entries, result{ErrorCode: code, ErrorMessage: msg})
		}
		name := busName(e.EventBusName)
		if fe := f.entryFault(Entry{Service: EventBridge, Target: name, Body: e.Detail, Key: e.DetailType}); fe != nil {
			fail(fe.Code, fe.Message)
			continue
		}
		if e.Source == "" || e.DetailType == "" || e.Detail == "" {
			fail("InvalidArgument", "Parameter(s) Source, DetailType, or Detail are missing.")
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(e.Detail), &obj) != nil || obj == nil {
			fail("MalformedDetail", "Detail is malformed.")
			continue
		}
		if strings.HasPrefix(e.Source, "aws.") {
			fail("NotAuthorizedForSourceException", "Not authorized for the source.")
			continue
		}
		ev := Event{ID: uuid.NewString(), Bus: name, Source: e.Source, DetailType: e.DetailType, Detail: e.Detail, Resources: e.Resources}
		if e.Time != nil {
			ev.Time = time.UnixMilli(int64(math.Round(*e.Time * 1000))).UTC() // the SDK sends milliseconds
		}
		out.Entries = append(out.Entries, result{EventId: ev.ID})
		if b, ok := f.buses[name]; ok { // else dropped, as EventBridge does
			b.events = append(b.events, ev)
			stored = true
		}
	}
	if stored {
		f.stored()
	}
	return out, nil
}
