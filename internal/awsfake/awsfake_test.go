package awsfake_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/pgoutbox/outbox/internal/awsfake"
)

var creds = credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestSNS: what the publisher and the benchmark rely on, through the real
// SDK: topics come and go, PublishBatch answers per entry, FIFO topics
// deduplicate, a missing topic is NotFound.
func TestSNS(t *testing.T) {
	t.Parallel()
	f := awsfake.Start()
	t.Cleanup(f.Close)
	c := sns.New(sns.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), Credentials: creds})
	ctx := timeout(t)

	out, err := c.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("orders.fifo"), Attributes: map[string]string{"FifoTopic": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.TopicArn)
	if arn != awsfake.TopicARN("orders.fifo") {
		t.Fatalf("TopicArn = %s", arn)
	}
	attrs, err := c.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: &arn})
	if err != nil || attrs.Attributes["FifoTopic"] != "true" {
		t.Fatalf("GetTopicAttributes: %v, %v", attrs, err)
	}
	str := func(s string) snstypes.MessageAttributeValue {
		return snstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
	}
	entries := []snstypes.PublishBatchRequestEntry{
		{Id: aws.String("a"), Message: aws.String(`{"n":1}`), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d1"),
			MessageAttributes: map[string]snstypes.MessageAttributeValue{"x": str("1")}},
		{Id: aws.String("b"), Message: aws.String(`{"n":2}`), MessageDeduplicationId: aws.String("d2")},                                  // no group
		{Id: aws.String("c"), Message: aws.String(`{"n":3}`), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d1")}, // duplicate
	}
	res, err := c.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: &arn, PublishBatchRequestEntries: entries})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Successful) != 2 || len(res.Failed) != 1 || aws.ToString(res.Failed[0].Id) != "b" || !res.Failed[0].SenderFault {
		t.Fatalf("PublishBatch: successful %+v, failed %+v", res.Successful, res.Failed)
	}
	msgs := f.Messages(arn)
	if len(msgs) != 1 || msgs[0].Message != `{"n":1}` || msgs[0].Attributes["x"].StringValue != "1" || msgs[0].GroupID != "g" {
		t.Fatalf("stored %+v, want the first message once", msgs)
	}
	if n := f.Calls("sns.PublishBatch"); n != 1 {
		t.Errorf("Calls = %d", n)
	}

	var nf *snstypes.NotFoundException
	if _, err := c.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(awsfake.TopicARN("missing")), PublishBatchRequestEntries: entries[:1]}); !errors.As(err, &nf) {
		t.Errorf("PublishBatch to a missing topic: %v, want NotFoundException", err)
	}
	if _, err := c.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: &arn}); err != nil {
		t.Fatal(err)
	}
	if got := f.Topics(); len(got) != 0 {
		t.Errorf("Topics() = %v after DeleteTopic", got)
	}
}

// TestEventBridge: PutEvents answers per entry in request order, a detail
// that is not a JSON object is MalformedDetail, and a bus that does not
// exist swallows events as the real service does, which only
// DescribeEventBus reveals.
func TestEventBridge(t *testing.T) {
	t.Parallel()
	f := awsfake.Start()
	t.Cleanup(f.Close)
	c := eventbridge.New(eventbridge.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), Credentials: creds})
	ctx := timeout(t)

	if _, err := c.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String("orders")}); err != nil {
		t.Fatal(err)
	}
	entry := func(bus, detail string) ebtypes.PutEventsRequestEntry {
		return ebtypes.PutEventsRequestEntry{EventBusName: aws.String(bus), Source: aws.String("test"), DetailType: aws.String("t"),
			Detail: aws.String(detail), Time: aws.Time(time.Unix(1700000000, 0))}
	}
	res, err := c.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
		entry("orders", `{"n":1}`), entry("orders", `[1]`), entry(awsfake.EventBusARN("orders"), `{"n":3}`), entry("nowhere", `{"n":4}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.FailedEntryCount != 1 || len(res.Entries) != 4 || aws.ToString(res.Entries[1].ErrorCode) != "MalformedDetail" ||
		res.Entries[0].EventId == nil || res.Entries[3].EventId == nil {
		t.Fatalf("PutEvents: %d failed, entries %+v", res.FailedEntryCount, res.Entries)
	}
	evs := f.Events("orders")
	if len(evs) != 2 || evs[1].Detail != `{"n":3}` || !evs[0].Time.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("stored %+v", evs)
	}
	var nf *ebtypes.ResourceNotFoundException
	if _, err := c.DescribeEventBus(ctx, &eventbridge.DescribeEventBusInput{Name: aws.String("nowhere")}); !errors.As(err, &nf) {
		t.Errorf("DescribeEventBus of a missing bus: %v, want ResourceNotFoundException", err)
	}
	var ve interface{ ErrorCode() string }
	big := entry("orders", `{"pad":"`+strings.Repeat("x", 256<<10)+`"}`)
	if _, err := c.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{big}}); !errors.As(err, &ve) || ve.ErrorCode() != "ValidationException" {
		t.Errorf("PutEvents over 256 KiB: %v, want ValidationException", err)
	}
	if _, err := c.DeleteEventBus(ctx, &eventbridge.DeleteEventBusInput{Name: aws.String("orders")}); err != nil {
		t.Fatal(err)
	}
	if got := f.Buses(); len(got) != 1 || got[0] != "default" {
		t.Errorf("Buses() = %v, want [default]", got)
	}
}

// TestKinesis: PutRecords answers per record in request order, maps keys
// to shards by MD5, and a missing stream is ResourceNotFoundException.
func TestKinesis(t *testing.T) {
	t.Parallel()
	f := awsfake.Start()
	t.Cleanup(f.Close)
	c := kinesis.New(kinesis.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), Credentials: creds})
	ctx := timeout(t)

	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(3)}); err != nil {
		t.Fatal(err)
	}
	f.SetFaults(awsfake.Faults{Entry: func(e awsfake.Entry) *awsfake.EntryFault {
		if e.Key == "hot" {
			return &awsfake.EntryFault{Code: "ProvisionedThroughputExceededException"}
		}
		return nil
	}})
	res, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: []ktypes.PutRecordsRequestEntry{
		{Data: []byte("one"), PartitionKey: aws.String("a")}, {Data: []byte("two"), PartitionKey: aws.String("hot")},
		{Data: []byte{0, 0xff}, PartitionKey: aws.String("b")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToInt32(res.FailedRecordCount) != 1 || aws.ToString(res.Records[1].ErrorCode) != "ProvisionedThroughputExceededException" ||
		aws.ToString(res.Records[0].ShardId) != awsfake.ShardOf("a", 3) || aws.ToString(res.Records[2].SequenceNumber) <= aws.ToString(res.Records[0].SequenceNumber) {
		t.Fatalf("PutRecords: %+v", res.Records)
	}
	recs := f.Records("orders")
	if len(recs) != 2 || string(recs[1].Data) != "\x00\xff" {
		t.Fatalf("stored %+v", recs)
	}
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamARN: aws.String(awsfake.StreamARN("orders"))})
	if err != nil || aws.ToInt32(sum.StreamDescriptionSummary.OpenShardCount) != 3 || sum.StreamDescriptionSummary.StreamStatus != ktypes.StreamStatusActive {
		t.Fatalf("DescribeStreamSummary: %+v, %v", sum, err)
	}
	var nf *ktypes.ResourceNotFoundException
	if _, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("missing"), Records: []ktypes.PutRecordsRequestEntry{{Data: []byte("x"), PartitionKey: aws.String("a")}}}); !errors.As(err, &nf) {
		t.Errorf("PutRecords to a missing stream: %v, want ResourceNotFoundException", err)
	}
	if _, err := c.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("orders")}); err != nil {
		t.Fatal(err)
	}
	if got := f.Streams(); len(got) != 0 {
		t.Errorf("Streams() = %v after DeleteStream", got)
	}
}

// TestUnsigned: a request without a SigV4 Authorization header is refused.
func TestUnsigned(t *testing.T) {
	t.Parallel()
	f := awsfake.Start()
	t.Cleanup(f.Close)
	c := kinesis.New(kinesis.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), Credentials: aws.AnonymousCredentials{}})
	_, err := c.DescribeStreamSummary(timeout(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("x")})
	if err == nil || !strings.Contains(err.Error(), "MissingAuthenticationToken") {
		t.Errorf("unsigned request: %v, want MissingAuthenticationToken", err)
	}
}
