package awsfake

//lint:file-ignore ST1003 struct fields are named after the Kinesis JSON members they encode (encoding/json writes a field's name as it is)

import (
	"crypto/md5"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Kinesis Data Streams, as AWS JSON 1.1 speaks it, with the PutRecords
// rules of the Kinesis API reference: 1 to 500 records; a partition key of
// 1 to 256 characters; each record's data plus partition key within the
// stream's maximum record size (MaxRecordSizeInKiB, 1 MiB by default) and
// the request's total within 10 MiB, else the whole call fails
// (ValidationException, InvalidArgumentException); records mapped to
// shards by the MD5 of their partition key over equal hash-key ranges;
// per-record results in request order, with a shard id and a sequence
// number increasing per stream; ResourceNotFoundException for a stream that
// does not exist. Streams are ACTIVE as soon as created. Records are
// stored, not readable through GetRecords: Records reads them.

const (
	kinesisMaxRecords      = 500
	kinesisMaxRequestBytes = 10 << 20
	kinesisDefaultMaxKiB   = 1024
	kinesisOnDemandShards  = 4
)

// Record is a record a stream accepted.
type Record struct {
	ShardID        string
	SequenceNumber string
	PartitionKey   string
	Data           []byte
}

type stream struct {
	name    string
	shards  int
	maxSize int
	records []Record
	seq     int64
}

// StreamARN is the ARN of the fake's stream name.
func StreamARN(name string) string {
	return "arn:aws:kinesis:" + Region + ":" + Account + ":stream/" + name
}

// Records returns the records stream (a name) accepted, in order; nil if
// the stream does not exist.
func (f *Server) Records(stream string) []Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.streams[stream]
	if !ok {
		return nil
	}
	return append([]Record(nil), s.records...)
}

// Streams returns the names of the streams that exist, sorted.
func (f *Server) Streams() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.streams))
	for name := range f.streams {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// ShardOf returns the shard a partition key maps to in a stream of n
// shards: the MD5 of the key as a 128-bit integer, over n equal ranges.
func ShardOf(partitionKey string, n int) string {
	sum := md5.Sum([]byte(partitionKey))
	h := new(big.Int).SetBytes(sum[:])
	h.Mul(h, big.NewInt(int64(n)))
	h.Rsh(h, 128)
	return fmt.Sprintf("shardId-%012d", h.Int64())
}

var streamNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// streamName resolves a stream name or ARN to a name.
func streamName(name, arn string) string {
	if name != "" {
		return name
	}
	if i := strings.LastIndex(arn, ":stream/"); i >= 0 {
		return arn[i+len(":stream/"):]
	}
	return ""
}

func errStreamNotFound(name string) *apiError {
	return errSender("ResourceNotFoundException", "Stream "+name+" under account "+Account+" not found.")
}

func (f *Server) kinesisOp(op string, decode func(any) *apiError) (any, *apiError) {
	var in struct {
		StreamName, StreamARN string
		ShardCount            *int
		MaxRecordSizeInKiB    *int
		StreamModeDetails     *struct{ StreamMode string }
		Records               []struct {
			Data         []byte // base64 in JSON, as the SDK sends blobs
			PartitionKey string
		}
	}
	if aerr := decode(&in); aerr != nil {
		return nil, aerr
	}
	name := streamName(in.StreamName, in.StreamARN)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch op {
	case "CreateStream":
		if !streamNamePattern.MatchString(name) {
			return nil, errSender("ValidationException", "invalid stream name "+name)
		}
		if _, ok := f.streams[name]; ok {
			return nil, errSender("ResourceInUseException", "Stream "+name+" under account "+Account+" already exists.")
		}
		s := &stream{name: name, shards: kinesisOnDemandShards, maxSize: kinesisDefaultMaxKiB << 10}
		if in.StreamModeDetails == nil || in.StreamModeDetails.StreamMode != "ON_DEMAND" {
			if in.ShardCount == nil || *in.ShardCount < 1 {
				return nil, errSender("InvalidArgumentException", "ShardCount is required for a provisioned stream")
			}
			s.shards = *in.ShardCount
		}
		if in.MaxRecordSizeInKiB != nil {
			if *in.MaxRecordSizeInKiB < 1024 || *in.MaxRecordSizeInKiB > 10240 {
				return nil, errSender("ValidationException", "MaxRecordSizeInKiB must be between 1024 and 10240")
			}
			s.maxSize = *in.MaxRecordSizeInKiB << 10
		}
		f.streams[name] = s
		return struct{}{}, nil
	case "DescribeStreamSummary":
		s, ok := f.streams[name]
		if !ok {
			return nil, errStreamNotFound(name)
		}
		return map[string]any{"StreamDescriptionSummary": map[string]any{
			"StreamName": s.name, "StreamARN": StreamARN(s.name), "StreamStatus": "ACTIVE", "OpenShardCount": s.shards,
			"RetentionPeriodHours": 24, "StreamCreationTimestamp": float64(time.Now().Unix()), "EnhancedMonitoring": []any{},
			"MaxRecordSizeInKiB": s.maxSize >> 10,
		}}, nil
	case "DeleteStream":
		if _, ok := f.streams[name]; !ok {
			return nil, errStreamNotFound(name)
		}
		delete(f.streams, name)
		return struct{}{}, nil
	case "PutRecords":
		s, ok := f.streams[name]
		bodies := make([]string, len(in.Records))
		for i, r := range in.Records {
			bodies[i] = string(r.Data)
		}
		if aerr := f.callFault(Call{Service: Kinesis, Op: "PutRecords", Target: name, Bodies: bodies}); aerr != nil {
			return nil, aerr
		}
		if !ok {
			return nil, errStreamNotFound(name)
		}
		if len(in.Records) == 0 || len(in.Records) > kinesisMaxRecords {
			return nil, errSender("ValidationException", fmt.Sprintf("1 validation error detected: Value at 'records' failed to satisfy constraint: Member must have length between 1 and %d (%d records)", kinesisMaxRecords, len(in.Records)))
		}
		total := 0
		for _, r := range in.Records {
			size := len(r.Data) + len(r.PartitionKey)
			total += size
			if n := utf8.RuneCountInString(r.PartitionKey); n < 1 || n > 256 {
				return nil, errSender("ValidationException", fmt.Sprintf("1 validation error detected: partitionKey of %d characters; 1 to 256", n))
			}
			if size > s.maxSize {
				return nil, errSender("ValidationException", fmt.Sprintf("1 validation error detected: a record of %d bytes exceeds the stream's maximum record size %d", size, s.maxSize))
			}
		}
		if total > kinesisMaxRequestBytes {
			return nil, errSender("InvalidArgumentException", fmt.Sprintf("Records size exceeds %d bytes (%d)", kinesisMaxRequestBytes, total))
		}
		type result struct {
			SequenceNumber string `json:",omitempty"`
			ShardId        string `json:",omitempty"`
			ErrorCode      string `json:",omitempty"`
			ErrorMessage   string `json:",omitempty"`
		}
		out := struct {
			FailedRecordCount int
			Records           []result
			EncryptionType    string
		}{Records: []result{}, EncryptionType: "NONE"}
		stored := false
		for _, r := range in.Records {
			shard := ShardOf(r.PartitionKey, s.shards)
			if fe := f.entryFault(Entry{Service: Kinesis, Target: name, Body: string(r.Data), Key: r.PartitionKey}); fe != nil {
				out.FailedRecordCount++
				msg := fe.Message
				if fe.Code == "ProvisionedThroughputExceededException" && msg == "" {
					msg = "Rate exceeded for shard " + shard + " in stream " + name + " under account " + Account + "."
				}
				out.Records = append(out.Records, result{ErrorCode: fe.Code, ErrorMessage: msg})
				continue
			}
			s.seq++
			rec := Record{ShardID: shard, SequenceNumber: fmt.Sprintf("%056d", s.seq), PartitionKey: r.PartitionKey, Data: r.Data}
			s.records = append(s.records, rec)
			stored = true
			out.Records = append(out.Records, result{SequenceNumber: rec.SequenceNumber, ShardId: shard})
		}
		if stored {
			f.stored()
		}
		return out, nil
	}
	return nil, errSender("UnknownOperationException", op+" is not implemented by awsfake")
}
